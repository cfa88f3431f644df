"""gpt-oss' mixture-of-experts layer with its MXFP4 weights kept packed.

gpt-oss checkpoints (``quant_method: "mxfp4"``) store each expert projection as
``<proj>_blocks`` uint8 [experts, out, in/32, 16] (32 E2M1 values per 16 bytes, low nibble
first) and ``<proj>_scales`` uint8 [experts, out, in/32] (one E8M0 scale per 32 values,
``2^(byte - 127)``), with the biases ``<proj>_bias`` [experts, out] in bf16; ``gate_up_proj``
maps hidden -> 2 x intermediate (gate and up interleaved: even outputs gate, odd up),
``down_proj`` intermediate -> hidden. :class:`Mxfp4Experts` holds these tensors under those
names, so the checkpoint loads into it as it is stored, and computes what transformers'
``GptOssExperts`` computes on the dequantized weights: for each expert that a token is
routed to, its two projections are dequantized into the compute dtype for that call only
(no dequantized copy is kept). The format is weight-only: activations stay in the compute
dtype.
"""

from __future__ import annotations

import torch
from torch import nn

from .dequant import dequantize_fp4

__all__ = ["MXFP4_BLOCK", "Mxfp4Experts", "dequantize_mxfp4"]

MXFP4_BLOCK = 32
"""Values per E8M0 scale."""


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The [..., out, in] float32 matrix of gpt-oss-layout MXFP4 ``blocks`` (uint8
    [..., out, in/32, 16]) and ``scales`` (uint8 or float8_e8m0fnu [..., out, in/32])."""
    if blocks.shape[-1] != MXFP4_BLOCK // 2 or blocks.shape[:-1] != scales.shape:
        raise ValueError(f"MXFP4 blocks [..., out, in/32, 16] and scales [..., out, in/32] "
                         f"do not match: {tuple(blocks.shape)} and {tuple(scales.shape)}")
    *lead, groups, half = blocks.shape
    rows = blocks.numel() // (groups * half)
    scale = scales if scales.dtype == torch.float8_e8m0fnu else scales.view(torch.float8_e8m0fnu)
    out = dequantize_fp4(blocks.reshape(rows, groups * half), scale.reshape(rows, groups),
                         MXFP4_BLOCK)
    return out.reshape(*lead, groups * MXFP4_BLOCK)


def _frozen(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t, requires_grad=False)


class Mxfp4Experts(nn.Module):
    """The experts of one gpt-oss MoE layer, MXFP4 weights packed (see the module
    docstring for the tensors). ``forward(hidden_states [tokens, hidden], router_indices
    [tokens, top_k], routing_weights [tokens, top_k])`` as ``GptOssExperts``: per routed
    expert ``gate_up = x W_gu^T + b_gu``; gate = even columns clamped above at ``limit``,
    up = odd columns clamped to ``[-limit, limit]``; ``(up + 1) * gate * sigmoid(alpha *
    gate)``; then ``W_d``, ``b_d``, times the routing weight, summed over the top-k."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int,
                 alpha: float = 1.702, limit: float = 7.0, dtype: torch.dtype = torch.bfloat16,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        for name, size in (("hidden_size", hidden_size), ("intermediate_size", intermediate_size)):
            if size % MXFP4_BLOCK:
                raise ValueError(f"Mxfp4Experts: {name} {size} is not a multiple of the MXFP4 "
                                 f"block of {MXFP4_BLOCK} values")
        self.num_experts, self.hidden_size = num_experts, hidden_size
        self.intermediate_size = intermediate_size
        self.alpha, self.limit = alpha, limit
        shapes = {"gate_up_proj": (2 * intermediate_size, hidden_size),
                  "down_proj": (hidden_size, intermediate_size)}
        for proj, (rows, cols) in shapes.items():
            groups = cols // MXFP4_BLOCK
            self.register_parameter(f"{proj}_blocks", _frozen(torch.zeros(
                num_experts, rows, groups, MXFP4_BLOCK // 2, dtype=torch.uint8, device=device)))
            self.register_parameter(f"{proj}_scales", _frozen(torch.full(
                (num_experts, rows, groups), 127, dtype=torch.uint8, device=device)))
            self.register_parameter(f"{proj}_bias", _frozen(torch.zeros(
                num_experts, rows, dtype=dtype, device=device)))

    @classmethod
    def from_config(cls, config, dtype: torch.dtype = torch.bfloat16,
                    device: torch.device | str | None = None) -> Mxfp4Experts:
        """The experts of a ``GptOssConfig`` (``num_local_experts``, ``hidden_size``,
        ``intermediate_size``, ``swiglu_alpha``, ``swiglu_limit``)."""
        return cls(config.num_local_experts, config.hidden_size, config.intermediate_size,
                   alpha=getattr(config, "swiglu_alpha", 1.702),
                   limit=getattr(config, "swiglu_limit", 7.0), dtype=dtype, device=device)

    def dequantized_weight(self, proj: str, expert: int, dtype: torch.dtype) -> torch.Tensor:
        """Expert ``expert``'s ``proj`` ("gate_up_proj" or "down_proj") weight [out, in]
        dequantized into ``dtype`` (a new tensor on each call)."""
        blocks = getattr(self, f"{proj}_blocks")[expert]
        scales = getattr(self, f"{proj}_scales")[expert]
        return dequantize_mxfp4(blocks, scales).to(dtype)

    def _apply_gate(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        gate = gate.clamp(min=None, max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        return (up + 1) * (gate * torch.sigmoid(gate * self.alpha))

    def forward(self, hidden_states: torch.Tensor, router_indices: torch.Tensor,
                routing_weights: torch.Tensor) -> torch.Tensor:
        dtype = hidden_states.dtype
        out = torch.zeros_like(hidden_states)
        with torch.no_grad():
            mask = nn.functional.one_hot(router_indices, num_classes=self.num_experts)
            mask = mask.permute(2, 1, 0)  # [experts, top_k, tokens]
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero().flatten().tolist()
        for e in hit:  # only the experts some token is routed to are dequantized
            top_k_pos, token_idx = torch.where(mask[e])
            x = hidden_states[token_idx]
            gate_up = x @ self.dequantized_weight("gate_up_proj", e, dtype).t() \
                + self.gate_up_proj_bias[e]
            y = self._apply_gate(gate_up) @ self.dequantized_weight("down_proj", e, dtype).t() \
                + self.down_proj_bias[e]
            y = y * routing_weights[token_idx, top_k_pos, None]
            out.index_add_(0, token_idx, y.to(dtype))
        return out

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, hidden_size={self.hidden_size}, "
                f"intermediate_size={self.intermediate_size}, alpha={self.alpha}, "
                f"limit={self.limit}")

"""Writes the tiny HF ``fp8`` and compressed-tensors test checkpoints, each by its format's
rules, with the dequantized bf16 reference beside it (make_checkpoints.py writes the
ModelOpt ones and calls this for the rest):

    python packages/flagos-quant/tests/make_checkpoints.py OUT_DIR

- ``hf-fp8``: transformers' ``FineGrainedFP8Config`` format (``quant_method: "fp8"``,
  128x128 blocks, dynamic activations), in the arithmetic of transformers' own
  quantizer (``Fp8Quantize``): ``s = 448 / amax`` per block in float32, ``q = e4m3(x * s)``,
  ``weight_scale_inv = 1 / s``. Its model has dimensions that are multiples of 128
  (hidden 128, MLP 256, 4 KV heads of 32), as that quantizer blocks only such weights.
- ``ct-fp8-dynamic``: compressed-tensors ``float-quantized``, llm-compressor's
  ``FP8_DYNAMIC`` scheme: per-channel weight scales, dynamic per-token activations.
- ``ct-fp8-static``: ``float-quantized``, the ``FP8`` scheme: per-tensor weight scales, a
  static per-tensor ``input_scale`` from calibration.
- ``ct-nvfp4``: ``nvfp4-pack-quantized``, the ``NVFP4`` scheme: E2M1 weights packed two a
  byte, E4M3 scales per 16, float32 ``weight_global_scale`` (a divisor), a static
  ``input_global_scale`` from calibration and dynamic per-16 activation scales.

compressed-tensors' arithmetic, followed here: scales are computed in the weight's dtype
(bf16): ``scale = amax / 448`` (FP8) or ``amax / 6`` per 16 (NVFP4) rounded to bf16;
FP8 weights are divided by their scale in bf16 and cast; NVFP4 global scales are
``448 * 6 / amax`` rounded to bf16 and stored as float32, shared by the layers that
read one input (q/k/v, gate/up; the smallest of the group's); the per-16 scale is
``e4m3(global * bf16(amax / 6))`` (float32 product), and elements are
``e2m1(x / (scale / global))`` in float32, packed low nibble first.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from flagos_quant.dequant import dequantize_fp4_over_global, dequantize_fp8
from flagos_quant.fp4 import pack_fp4, round_to_e2m1

E4M3_MAX = 448.0
FORMATS = ("hf-fp8", "ct-fp8-dynamic", "ct-fp8-static", "ct-nvfp4")
# hf-fp8's model (the others use make_checkpoints.CONFIG)
HF_FP8_SIZES = {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
                "num_key_value_heads": 4}
IGNORE = ["lm_head"]
CT_VERSION = "0.19.0"


# --- HF fp8 ------------------------------------------------------------------------------

def hf_fp8_quantize(w: torch.Tensor, block: tuple[int, int] = (128, 128)
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' rule: per block ``s = 448 / amax`` (float32; 1 for an all-zero
    block), ``q = e4m3(clamp(x * s))``, ``weight_scale_inv = 1 / s`` (float32)."""
    rows, cols = w.shape
    br, bc = block
    if rows % br or cols % bc:
        raise ValueError(f"the HF fp8 writer blocks {br}x{bc}: {rows}x{cols} does not divide")
    tiles = w.float().reshape(rows // br, br, cols // bc, bc)
    amax = tiles.abs().amax(dim=(1, 3))
    s = torch.where(amax > 0, E4M3_MAX / torch.where(amax > 0, amax, torch.ones_like(amax)),
                    torch.ones_like(amax))
    q = (tiles * s[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q.reshape(rows, cols), (1.0 / s).float()


def hf_fp8_config() -> dict:
    return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
            "weight_block_size": [128, 128], "modules_to_not_convert": IGNORE}


# --- compressed-tensors ------------------------------------------------------------------

def _bf16_eps_guard(scale: torch.Tensor) -> torch.Tensor:
    """compressed-tensors replaces a zero scale by its dtype's eps."""
    return torch.where(scale == 0, torch.tensor(torch.finfo(scale.dtype).eps, dtype=scale.dtype),
                       scale)


def ct_fp8_weight(w: torch.Tensor, per_channel: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``float-quantized``: scale = bf16(amax / 448) per output channel [N, 1] or per
    tensor [1]; ``q = e4m3(clamp(bf16(w / scale)))``."""
    amax = w.abs().amax(dim=1, keepdim=True) if per_channel else w.abs().amax().reshape(1)
    scale = _bf16_eps_guard(amax / E4M3_MAX)
    q = (w / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale


def ct_nvfp4_global(amax: torch.Tensor) -> torch.Tensor:
    """compressed-tensors' global scale ``448 * 6 / amax`` (in amax's dtype), float32 [1]."""
    amax = amax.clamp(min=torch.finfo(amax.dtype).tiny)
    return (E4M3_MAX * 6.0 / amax).float().reshape(1)


def ct_nvfp4_weight(w: torch.Tensor, global_scale: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """``nvfp4-pack-quantized`` weight: per-16 scale ``e4m3(global * bf16(amax / 6))``,
    elements ``e2m1(x / (scale / global))`` in float32, packed low nibble first."""
    rows, cols = w.shape
    blocks = w.reshape(rows, cols // 16, 16)
    local = blocks.abs().amax(dim=-1) / 6.0  # bf16
    scale = (global_scale * local).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    scale = torch.where(scale.float() == 0, torch.tensor(0.125), scale.float()) \
        .to(torch.float8_e4m3fn)
    step = scale.float() / global_scale
    codes = round_to_e2m1(blocks.float() / step.unsqueeze(-1)).reshape(rows, cols)
    return pack_fp4(codes), scale


def _scheme(bits: int, strategy: str, dynamic: object, group: int | None,
            observer: str | None, fp4: bool) -> dict:
    return {"actorder": None, "block_structure": None, "dynamic": dynamic,
            "group_size": group, "num_bits": bits, "observer": observer,
            "observer_kwargs": {}, "scale_dtype": "torch.float8_e4m3fn" if fp4 else None,
            "strategy": strategy, "symmetric": True, "type": "float", "zp_dtype": None}


def ct_config(fmt: str) -> dict:
    """config.json's ``quantization_config`` as compressed-tensors writes it."""
    if fmt == "ct-fp8-dynamic":
        form = "float-quantized"
        weights = _scheme(8, "channel", False, None, "memoryless_minmax", False)
        inputs = _scheme(8, "token", True, None, None, False)
    elif fmt == "ct-fp8-static":
        form = "float-quantized"
        weights = _scheme(8, "tensor", False, None, "memoryless_minmax", False)
        inputs = _scheme(8, "tensor", False, None, "static_minmax", False)
    else:
        form = "nvfp4-pack-quantized"
        weights = _scheme(4, "tensor_group", False, 16, "memoryless_minmax", True)
        inputs = _scheme(4, "tensor_group", "local", 16, "static_minmax", True)
    return {"config_groups": {"group_0": {"format": form, "input_activations": inputs,
                                          "output_activations": None, "targets": ["Linear"],
                                          "weights": weights}},
            "format": form, "global_compression_ratio": None, "ignore": IGNORE,
            "kv_cache_scheme": None, "quant_method": "compressed-tensors",
            "quantization_status": "compressed", "sparsity_config": {},
            "transform_config": {}, "version": CT_VERSION}


# --- writing -----------------------------------------------------------------------------

def quantized_state(fmt: str, model, fused_group
                    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The checkpoint tensors of ``fmt`` (without the input scales) and the bf16
    reference state dict."""
    linears = {n for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and n not in IGNORE}
    state = model.state_dict()
    quantized: dict[str, torch.Tensor] = {}
    reference: dict[str, torch.Tensor] = {}
    for name, p in state.items():
        layer, _, leaf = name.rpartition(".")
        if layer not in linears or leaf != "weight":
            quantized[name] = reference[name] = p.contiguous()
            continue
        if fmt == "hf-fp8":
            q, inv = hf_fp8_quantize(p)
            tensors = {"weight": q, "weight_scale_inv": inv}
            deq = dequantize_fp8(q, inv, (128, 128))
        elif fmt in ("ct-fp8-dynamic", "ct-fp8-static"):
            q, s = ct_fp8_weight(p, per_channel=fmt == "ct-fp8-dynamic")
            tensors = {"weight": q, "weight_scale": s}
            deq = dequantize_fp8(q, s, (1, q.shape[1]) if s.numel() > 1 else None)
        else:
            group_amax = torch.stack([state[f"{g}.weight"].abs().amax()
                                      for g in fused_group(layer)]).amax()
            g = ct_nvfp4_global(group_amax)
            packed, s = ct_nvfp4_weight(p, g)
            tensors = {"weight_packed": packed, "weight_scale": s, "weight_global_scale": g}
            deq = dequantize_fp4_over_global(packed, s, 16, g)
        quantized.update({f"{layer}.{k}": v.contiguous() for k, v in tensors.items()})
        reference[name] = deq.to(torch.bfloat16).contiguous()
    return quantized, reference


def write(out: Path, fmt: str, base_model, calibration_amax, fused_group) -> None:
    """Write OUT/<fmt>/ and OUT/<fmt>-bf16/ (``base_model(**sizes)`` builds the seeded
    model, ``calibration_amax(model)`` gives each linear layer's input amax over the
    calibration batch)."""
    model = base_model(**(HF_FP8_SIZES if fmt == "hf-fp8" else {}))
    quantized, reference = quantized_state(fmt, model, fused_group)
    if fmt in ("ct-fp8-static", "ct-nvfp4"):
        for layer, amax in calibration_amax(model).items():
            amax = torch.tensor(amax, dtype=torch.bfloat16)
            if fmt == "ct-fp8-static":
                quantized[f"{layer}.input_scale"] = _bf16_eps_guard(amax / E4M3_MAX).reshape(1)
            else:
                quantized[f"{layer}.input_global_scale"] = ct_nvfp4_global(amax)
    qc = hf_fp8_config() if fmt == "hf-fp8" else ct_config(fmt)
    save_pair(out, fmt, model.config.to_dict(), quantized, reference, qc)


def save_pair(out: Path, fmt: str, cfg: dict, quantized: dict[str, torch.Tensor],
              reference: dict[str, torch.Tensor], quantization_config: dict,
              extra_files: dict[str, dict] | None = None) -> None:
    """OUT/<fmt>/ (config.json with ``quantization_config``, model.safetensors, and
    ``extra_files`` as JSON) and OUT/<fmt>-bf16/ (the reference, no quantization config)."""
    from safetensors.torch import save_file

    for d, tensors, q in ((out / fmt, quantized, quantization_config),
                          (out / f"{fmt}-bf16", reference, None)):
        d.mkdir(parents=True, exist_ok=True)
        c = dict(cfg)
        c.pop("quantization_config", None)
        if q is not None:
            c["quantization_config"] = q
            for name, content in (extra_files or {}).items():
                (d / name).write_text(json.dumps(content, indent=2) + "\n")
        (d / "config.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
        save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})

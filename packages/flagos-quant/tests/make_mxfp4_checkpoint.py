"""Writes the tiny gpt-oss MXFP4 test checkpoint by the format's rules, with the
dequantized bf16 reference beside it:

    python packages/flagos-quant/tests/make_mxfp4_checkpoint.py OUT_DIR

OUT_DIR/gpt-oss-mxfp4/ holds config.json (``quantization_config: {"quant_method": "mxfp4",
"modules_to_not_convert": [...]}`` as gpt-oss' own checkpoints have it) and
model.safetensors with the experts as gpt-oss stores them: per layer
``mlp.experts.{gate_up,down}_proj_blocks`` uint8 [experts, out, in/32, 16],
``..._scales`` uint8 [experts, out, in/32] (E8M0) and ``..._bias`` bf16 [experts, out];
attention, router, embeddings and norms in bf16. OUT_DIR/gpt-oss-mxfp4-bf16/ is the same
model with the experts dequantized to bf16 in transformers' own layout (``gate_up_proj``
[experts, hidden, 2 x intermediate], ``down_proj`` [experts, intermediate, hidden]).

The model: a 2-layer gpt-oss (hidden 64, intermediate 64, 4 experts, top 2, 4 heads, 2 KV
heads of 16, vocabulary 256) with seeded random weights; deterministic. The experts are
quantized with :func:`flagos_quant.quantize.quantize_mxfp4` (the rule of OpenAI's
triton_kernels ``downcast_to_mxfp_torch``, which transformers quantizes gpt-oss experts
with: power-of-two scale ``amax / 6`` rounded up, elements rounded to nearest, ties away
from zero). transformers 5.23.0 cannot quantize bf16 -> MXFP4 on a CPU machine (its
``Mxfp4Quantize`` needs the ``kernels`` package's hub download of gpt-oss-triton-kernels),
so the files are checked against transformers' own dequantization instead
(``transformers.integrations.mxfp4.convert_moe_packed_tensors``, bit for bit, in
test_mxfp4.py): the reference is what transformers 5.23.0 itself makes of the checkpoint.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from flagos_quant.mxfp4_moe import dequantize_mxfp4
from flagos_quant.quantize import quantize_mxfp4

FORMAT = "gpt-oss-mxfp4"
VOCAB = 256
CONFIG = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
          "sliding_window": 8, "max_position_embeddings": 128,
          "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
          "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
          "pad_token_id": 0}
# as in openai/gpt-oss-20b's config.json
MODULES_TO_NOT_CONVERT = ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                          "model.embed_tokens", "lm_head"]
PROJECTIONS = ("gate_up_proj", "down_proj")


def base_model():
    """The seeded bf16 gpt-oss (random weights, larger than the default init so that its
    next-token distributions are not flat)."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GptOssConfig(**CONFIG, initializer_range=0.2, dtype="bfloat16",
                                    architectures=["GptOssForCausalLM"])
    return transformers.GptOssForCausalLM(cfg).to(torch.bfloat16).eval()


def quantize_experts(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A transformers-layout expert weight [experts, in, out] as gpt-oss' ``blocks`` uint8
    [experts, out, in/32, 16] and ``scales`` uint8 [experts, out, in/32]."""
    w = weight.transpose(1, 2)  # [experts, out, in]: quantized along the input dimension
    packed, scale = quantize_mxfp4(w)
    e, rows, cols = w.shape
    return packed.reshape(e, rows, cols // 32, 16).contiguous(), \
        scale.view(torch.uint8).contiguous()


def write(out: Path) -> None:
    """Write OUT/gpt-oss-mxfp4/ and OUT/gpt-oss-mxfp4-bf16/."""
    from safetensors.torch import save_file

    model = base_model()
    quantized: dict[str, torch.Tensor] = {}
    reference: dict[str, torch.Tensor] = {}
    for name, p in model.state_dict().items():
        prefix, _, leaf = name.rpartition(".")
        if prefix.endswith(".mlp.experts") and leaf in PROJECTIONS:
            blocks, scales = quantize_experts(p)
            quantized[f"{name}_blocks"], quantized[f"{name}_scales"] = blocks, scales
            deq = dequantize_mxfp4(blocks, scales).transpose(1, 2)
            reference[name] = deq.to(torch.bfloat16).contiguous()
        else:
            quantized[name] = reference[name] = p.contiguous()
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    qc = {"modules_to_not_convert": MODULES_TO_NOT_CONVERT, "quant_method": "mxfp4"}
    for d, tensors, c in ((out / FORMAT, quantized, {**cfg, "quantization_config": qc}),
                          (out / f"{FORMAT}-bf16", reference, cfg)):
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
        save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    write(Path(argv[0]))
    sizes = {d.name: sum(f.stat().st_size for f in d.iterdir()) // 1024
             for d in sorted(Path(argv[0]).glob(f"{FORMAT}*"))}
    print(", ".join(f"{name}: {kib} KiB" for name, kib in sizes.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

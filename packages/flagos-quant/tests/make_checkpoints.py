"""Writes the tiny quantized test checkpoints, each by its format's rules, with the
dequantized bf16 reference beside it:

    python packages/flagos-quant/tests/make_checkpoints.py OUT_DIR

OUT_DIR/<format>/ holds config.json (with ``quantization_config``), hf_quant_config.json
(ModelOpt's nested form of the same config, ModelOpt formats only) and model.safetensors; OUT_DIR/<format>-bf16/
the same model with every quantized weight dequantized to bf16 (what the quantized one is
compared against). The model: a 2-layer Llama (hidden 64, MLP 128, 4 heads, 2 KV heads,
vocabulary 256) with seeded random weights; static input scales are calibrated on seeded
random tokens, as ModelOpt's calibration does (amax of each layer's input over the
calibration batch). Deterministic: the same files on every run. The HF ``fp8`` and
compressed-tensors formats are written by make_hf_checkpoints.py (see there).
"""

from __future__ import annotations

import sys
from pathlib import Path

import make_hf_checkpoints
import torch
from flagos_quant.dequant import dequantize_fp4, dequantize_fp8
from flagos_quant.quantize import E4M3_MAX, quantize_nvfp4

MODELOPT_FORMATS = ("modelopt-fp8", "modelopt-nvfp4")
FORMATS = MODELOPT_FORMATS + make_hf_checkpoints.FORMATS
VOCAB = 256
CONFIG = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "max_position_embeddings": 128, "tie_word_embeddings": False,
          "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
IGNORE = ["lm_head", "model.embed_tokens"]
PRODUCER = {"name": "flagos-quant tests/make_checkpoints.py", "version": "1"}


def base_model(**sizes):
    """The seeded bf16 model (random weights, larger than the default init so that its
    next-token distributions are not flat); ``sizes`` override CONFIG's."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**{**CONFIG, **sizes}, initializer_range=0.2,
                                   dtype="bfloat16",
                                   architectures=["LlamaForCausalLM"])
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    return model


def calibration_amax(model) -> dict[str, float]:
    """amax of the input of every linear layer over a seeded calibration batch."""
    amax: dict[str, float] = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name not in IGNORE:
            def hook(m, args, name=name):
                amax[name] = max(amax.get(name, 0.0), args[0].detach().abs().max().float().item())
            hooks.append(mod.register_forward_pre_hook(hook))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        model(torch.randint(3, VOCAB, (4, 32), generator=g))
    for h in hooks:
        h.remove()
    return amax


# Layers that read one input, fused into one GEMM by ModelOpt's deployment targets: its
# exporter gives them one NVFP4 global weight scale (the largest of the group's).
FUSED = (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
         ("mlp.gate_proj", "mlp.up_proj"))


def _fused_group(layer: str) -> tuple[str, ...]:
    prefix, _, leaf = layer.rpartition(".")
    prefix, _, parent = prefix.rpartition(".")
    for group in FUSED:
        if f"{parent}.{leaf}" in group:
            return tuple(f"{prefix}.{g}" for g in group)
    return (layer,)


def _quantize_layer(algo: str, w: torch.Tensor, in_amax: float,
                    global_scale: torch.Tensor | None = None
                    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The checkpoint tensors of one linear layer (bf16 weight ``w``) and its dequantized
    weight (float32), in ModelOpt's exporter's arithmetic: the FP8 weight is divided by its
    float32 scale in the weight's own dtype (a 0-dim float32 tensor does not promote a
    bf16 one), then cast; NVFP4 divides in float32."""
    if algo == "FP8":
        s = w.detach().abs().amax().float() / E4M3_MAX
        q = (w / s).to(torch.float8_e4m3fn)
        tensors = {"weight": q, "weight_scale": s,
                   "input_scale": torch.tensor(in_amax / E4M3_MAX, dtype=torch.float32)}
        return tensors, dequantize_fp8(q, s)
    packed, block, glob = quantize_nvfp4(w, global_scale)
    tensors = {"weight": packed, "weight_scale": block, "weight_scale_2": glob,
               "input_scale": torch.tensor(in_amax / (6.0 * E4M3_MAX), dtype=torch.float32)}
    return tensors, dequantize_fp4(packed, block, 16, glob)


def quant_config(algo: str) -> tuple[dict, dict]:
    """config.json's ``quantization_config`` (flat, as ModelOpt 0.47 writes it) and
    hf_quant_config.json (nested)."""
    bits, group = (8, {}) if algo == "FP8" else (4, {"group_size": 16})
    scheme = {"dynamic": False, "num_bits": bits, "type": "float", **group}
    flat = {"config_groups": {"group_0": {"input_activations": scheme, "weights": scheme,
                                          "targets": ["Linear"]}},
            "ignore": IGNORE, "quant_algo": algo, "producer": PRODUCER,
            "quant_method": "modelopt"}
    nested = {"producer": PRODUCER,
              "quantization": {"quant_algo": algo, "kv_cache_quant_algo": None,
                               "exclude_modules": IGNORE, **group}}
    return flat, nested


def write(out: Path, fmt: str) -> None:
    """Write OUT/<fmt>/ and OUT/<fmt>-bf16/."""
    if fmt in make_hf_checkpoints.FORMATS:
        make_hf_checkpoints.write(out, fmt, base_model, calibration_amax, _fused_group)
        return
    algo = {"modelopt-fp8": "FP8", "modelopt-nvfp4": "NVFP4"}[fmt]
    model = base_model()
    amax = calibration_amax(model)
    quantized: dict[str, torch.Tensor] = {}
    reference: dict[str, torch.Tensor] = {}
    linears = {n for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and n not in IGNORE}
    state = model.state_dict()
    for name, p in state.items():
        layer, _, leaf = name.rpartition(".")
        if layer in linears and leaf == "weight":
            glob = None
            if algo == "NVFP4":
                group_amax = max(state[f"{g}.weight"].abs().amax().float()
                                 for g in _fused_group(layer))
                glob = group_amax / (6.0 * E4M3_MAX)
            tensors, deq = _quantize_layer(algo, p, amax[layer], glob)
            quantized.update({f"{layer}.{k}": v.contiguous() for k, v in tensors.items()})
            reference[name] = deq.to(torch.bfloat16).contiguous()
        else:
            quantized[name] = p.contiguous()
            reference[name] = p.contiguous()
    flat, nested = quant_config(algo)
    make_hf_checkpoints.save_pair(out, fmt, model.config.to_dict(), quantized, reference, flat,
                                  {"hf_quant_config.json": nested})


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    for fmt in FORMATS:
        write(out, fmt)
        for d in (out / fmt, out / f"{fmt}-bf16"):
            size = sum(f.stat().st_size for f in d.iterdir())
            print(f"{d}: {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

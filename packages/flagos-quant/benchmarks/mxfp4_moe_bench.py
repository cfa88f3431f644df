"""gpt-oss MoE experts with MXFP4 weights (emulated, dequantized per routed expert and
call) against the same experts in bf16, side by side in one run:

    FLAGOS_HAL=cuda python packages/flagos-quant/benchmarks/mxfp4_moe_bench.py [--quick] [--json PATH]

One MoE layer of gpt-oss-20b's shape (32 experts, hidden 2880, intermediate 2880, top 4;
``--quick`` and sim: 8 experts of 256, top 2), for 1 token (decode) and 32 tokens:
transformers' ``GptOssExperts`` (its eager per-expert loop) with the dequantized bf16
weights on flagos, ``flagos_quant.Mxfp4Experts`` on flagos, and, where the twin is a CUDA
GPU, ``GptOssExperts`` on plain CUDA tensors. Times are medians of calibrated rounds of
calls (flagos.bench.timeit); ratios: time / the bf16 time on flagos. Also the device bytes
of the experts' weights and the relative L2 difference of the two outputs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import flagos
import torch
from flagos.bench import timeit
from flagos.bench_results import Table, write_json
from flagos_quant.mxfp4_moe import Mxfp4Experts


def _experts(cfg, dev: str):
    """Random MXFP4 experts (blocks of every byte, scales 2^-8..2^-4) and transformers'
    bf16 experts holding their dequantized weights, both on ``dev`` (dequantized there,
    one expert at a time)."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    g = torch.Generator().manual_seed(0)
    packed = Mxfp4Experts.from_config(cfg)
    for name, p in packed.named_parameters():
        if name.endswith("_blocks"):
            p.data = torch.randint(0, 256, p.shape, dtype=torch.uint8, generator=g)
        elif name.endswith("_scales"):
            p.data = torch.randint(119, 124, p.shape, dtype=torch.uint8, generator=g)
        else:
            p.data = (torch.randn(p.shape, generator=g) * 0.1).bfloat16()
    packed = packed.to(dev)
    with torch.device("meta"):
        ref = GptOssExperts(cfg)
    for proj in ("gate_up_proj", "down_proj"):
        w = torch.stack([packed.dequantized_weight(proj, e, torch.bfloat16).t()
                         for e in range(packed.num_experts)])
        setattr(ref, proj, torch.nn.Parameter(w, requires_grad=False))
        setattr(ref, f"{proj}_bias", torch.nn.Parameter(
            getattr(packed, f"{proj}_bias").detach().clone(), requires_grad=False))
    return packed, ref


def _routing(tokens: int, cfg, dev: str):
    g = torch.Generator().manual_seed(tokens)
    idx = torch.stack([torch.randperm(cfg.num_local_experts, generator=g)[:cfg.num_experts_per_tok]
                       for _ in range(tokens)])
    weights = torch.softmax(torch.randn(tokens, cfg.num_experts_per_tok, generator=g), -1)
    x = torch.randn(tokens, cfg.hidden_size, generator=g)
    return x.bfloat16().to(dev), idx.to(dev), weights.bfloat16().to(dev)


def _bytes(module: torch.nn.Module) -> int:
    return sum(p.untyped_storage().nbytes() for n, p in module.named_parameters()
               if not n.endswith("_bias"))


def _time_us(module: torch.nn.Module, args: list, min_time: float) -> float:
    """Median microseconds per call (flagos.bench.timeit: calibrated, synchronized)."""
    return timeit(lambda: module(*args), args[0].device, min_time) * 1e6


@torch.no_grad()
def bench(cfg, token_counts, min_time: float) -> list[list]:
    packed, ref = _experts(cfg, "flagos")
    native = _experts(cfg, "cuda")[1] if flagos.get_device_properties(0).twin_device == "cuda" \
        else None
    shape = f"{cfg.num_local_experts}x{cfg.hidden_size}x{cfg.intermediate_size} top{cfg.num_experts_per_tok}"
    rows = []
    for tokens in token_counts:
        args = _routing(tokens, cfg, "flagos")
        t_bf16, t_mx = (_time_us(m, args, min_time) for m in (ref, packed))
        want, got = ref(*args).float(), packed(*args).float()
        rel = ((got - want).norm() / want.norm()).item()
        t_native = None
        if native is not None:
            t_native = _time_us(native, [a.to("cuda") for a in args], min_time)
        rows.append([shape, tokens, "bf16 GptOssExperts", t_bf16, 1.0, _bytes(ref), None,
                     t_native])
        rows.append([shape, tokens, "MXFP4 Mxfp4Experts (emulated)", t_mx, t_mx / t_bf16,
                     _bytes(packed), rel, None])
    return rows


NOTES = [
    ("MXFP4: blocks and scales stay packed (0.53125 byte per weight); each routed expert's "
     "weights are dequantized to bf16 at each call"),
    ("bf16: transformers' GptOssExperts (eager loop) holding the same weights dequantized "
     "once, 2 bytes per weight"),
    "native cuda bf16 = GptOssExperts on plain CUDA tensors, same process",
]


def main() -> None:
    import transformers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small shapes (sim smoke test)")
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = ap.parse_args()
    quick = args.quick or flagos.get_device_properties(0).twin_device != "cuda"
    dims = {"num_local_experts": 32, "hidden_size": 2880, "intermediate_size": 2880,
            "num_experts_per_tok": 4}
    if quick:
        dims = {"num_local_experts": 8, "hidden_size": 256, "intermediate_size": 256,
                "num_experts_per_tok": 2}
    cfg = transformers.GptOssConfig(**dims)
    cfg._experts_implementation = "eager"
    table = Table("mxfp4-moe", "gpt-oss MoE layer: MXFP4 experts emulated on flagos vs bf16",
                  ["experts", "tokens", "case", "flagos us", "vs flagos bf16",
                   "weight bytes", "relative L2 vs bf16", "native cuda bf16 us"],
                  notes=NOTES)
    for row in bench(cfg, [1, 32], 0.05 if quick else 0.3):
        table.add(*row)
    print(table.format())
    if args.json:
        write_json(args.json, [table])


if __name__ == "__main__":
    main()

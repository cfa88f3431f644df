"""Host time per call of the packed linear ops (batch 1, where eager decoding is bound by
the host), layer by layer of the call path, beside bf16 ``F.linear``:

    FLAGOS_HAL=cuda python packages/flagos-quant/benchmarks/fused_linear_host.py [--profile]
        [--json PATH]

Rows, each on plain CUDA tensors and on flagos tensors routed to ``boxing`` (the twin's
Triton kernel): the module's forward, with flagos' launch cache (the repeated one-row
launch made from C++) and without it; the op through the dispatcher (with and without
autograd's key, i.e. outside and inside ``torch.inference_mode``); the Triton wrapper
alone (checks, output allocation, launch); the launch alone. ``--profile`` adds cProfile's
top functions of the module call on CUDA tensors and on flagos tensors (where the
difference goes). Needs a CUDA twin (the cuda HAL).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

import flagos
import torch
import torch.nn.functional as F
from flagos import launch_cache
from flagos.bench import timeit
from flagos.bench_results import Table, write_json
from flagos_quant import FP8Linear, quantize_fp8, quantize_linears, set_weight_only, triton_linear
from flagos_quant.fused_linear import FP8_WEIGHT_LINEAR, NVFP4_WEIGHT_LINEAR

ROUTES = {FP8_WEIGHT_LINEAR: "boxing", NVFP4_WEIGHT_LINEAR: "boxing"}


def _layers(n: int, k: int):
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    fp8 = FP8Linear(k, n, static_input=False, device="cuda")
    fp8.weight.data, fp8.weight_scale.data = quantize_fp8(w)
    holder = torch.nn.Sequential(torch.nn.Linear(k, n, bias=False, device="cuda",
                                                 dtype=torch.bfloat16))
    holder[0].weight.data = w.clone()
    quantize_linears(holder, "NVFP4", skip=())
    set_weight_only(fp8, True)
    set_weight_only(holder, True)
    return w, fp8, holder[0]


def _paths(layer, x: torch.Tensor) -> dict:
    """The call path's layers for one module on ``x``'s device."""
    if isinstance(layer, FP8Linear):
        w, s = layer.weight, layer.weight_scale.reshape(1, 1)
        block = list(w.shape)

        def op():
            return torch.ops.flagos_quant.fp8_weight_linear(x, w, s, block, None)

        def wrapper():
            return triton_linear.fp8_linear(x, w, s, block, None)
    else:
        w, s, g = layer.weight, layer.weight_scale, layer.weight_scale_2

        def op():
            return torch.ops.flagos_quant.nvfp4_weight_linear(x, w, s, g, None)

        def wrapper():
            return triton_linear.nvfp4_linear(x, w, s, g, None)

    def op_inference():
        with torch.inference_mode():
            return op()

    def module_uncached():
        with launch_cache.disabled():
            return layer(x)

    paths = {"module forward": lambda: layer(x),
             "module forward, launch cache off": module_uncached, "op": op,
             "op in inference_mode": op_inference}
    if x.device.type == "cuda":
        paths["Triton wrapper"] = wrapper
    return paths


def _launch_only(layer, x: torch.Tensor):
    """The kernel launch as the wrapper makes it, with the output and arguments made once."""
    triton, fp8_family, nvfp4_family = triton_linear._kernels()
    y = torch.empty((1, layer.out_features), dtype=x.dtype, device=x.device)
    if isinstance(layer, FP8Linear):
        w, s = layer.weight, layer.weight_scale.reshape(1, 1)
        n, k = w.shape
        args = {"w": w, "s": s, "b": y, "HAS_BIAS": False, "swn": w.stride(0),
                "swk": w.stride(1), "ssn": s.stride(0), "ssk": s.stride(1), "scale_rows": n,
                "scale_cols": k}
        return lambda: triton_linear._launch(triton, fp8_family, x, y, {"SCALE_K": 0},
                                             triton_linear.FP8_GEMV_TILE, **args)
    w, s, g = layer.weight, layer.weight_scale, layer.weight_scale_2.reshape(1).float()
    args = {"w": w, "s": s, "g": g, "b": y, "HAS_BIAS": False, "swn": w.stride(0),
            "swk": w.stride(1), "ssn": s.stride(0), "ssk": s.stride(1)}
    return lambda: triton_linear._launch(triton, nvfp4_family, x, y, {},
                                         triton_linear.NVFP4_GEMV_TILE, **args)


def _check(fmt: str, layer, x: torch.Tensor, paths: dict) -> None:
    """Each path's result (after the timing's repeated calls, i.e. through the repeat
    launch) against the op's definition: dequantize, round to bf16, F.linear."""
    want = F.linear(x.float(), layer.dequantized_weight(x.dtype).float())
    for name, fn in paths.items():
        if name == "launch only":
            continue
        got = fn().float()
        err = ((got - want).norm() / want.norm()).item()
        print(f"  {fmt} {name}: relative L2 error vs the definition {err:.2e}", flush=True)
        if not err < 1e-2:
            raise SystemExit(f"{fmt} {name}: result differs from the definition ({err:.2e})")


def _profile(fn, calls: int = 300) -> cProfile.Profile:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    return prof


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4096,4096", help="N,K of the weight")
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--profile", action="store_true",
                    help="cProfile the module calls, on CUDA and on flagos tensors")
    ap.add_argument("--json", default="", help="also write the table here (JSON)")
    args = ap.parse_args()
    if flagos.get_device_properties(0).twin_device != "cuda":
        raise SystemExit("needs the cuda HAL (FLAGOS_HAL=cuda) on a CUDA GPU")
    n, k = (int(v) for v in args.shape.split(","))
    w, fp8, nv = _layers(n, k)
    xc = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    table = Table("quant-host", f"host us per call of the packed linear ops, 1x{k} @ {k}x{n}, "
                  "bf16 activations, by layer of the call path",
                  ["format", "path", "cuda us", "flagos us", "flagos - cuda us"])

    def us(fn, dev: str) -> float:
        return round(timeit(fn, torch.device(dev, 0), args.min_time) * 1e6, 2)

    xf, wf = xc.to("flagos"), w.to("flagos")
    table.add("bf16", "F.linear", us(lambda: F.linear(xc, w), "cuda"),
              us(lambda: F.linear(xf, wf), "flagos"), "-")
    profiles = {}
    for fmt, layer in (("FP8", fp8), ("NVFP4", nv)):
        cuda_paths = _paths(layer, xc)
        cuda_paths["launch only"] = _launch_only(layer, xc)
        cuda_us = {name: us(fn, "cuda") for name, fn in cuda_paths.items()}
        _check(fmt, layer, xc, cuda_paths)
        if args.profile:
            profiles[f"{fmt} module forward on CUDA tensors"] = _profile(
                cuda_paths["module forward"])
        layer.to("flagos")
        with flagos.routing.override(ROUTES):
            flagos_paths = _paths(layer, xf)
            flagos_us = {name: us(fn, "flagos") for name, fn in flagos_paths.items()}
            if args.profile:
                profiles[f"{fmt} module forward on flagos"] = _profile(
                    flagos_paths["module forward"])
        layer.to("cuda")
        for name, t in cuda_us.items():
            f = flagos_us.get(name)
            table.add(fmt, name, t, "-" if f is None else f,
                      "-" if f is None else round(f - t, 2))
    print(table.format(), flush=True)
    if args.json:
        write_json(args.json, [table])
    for what, prof in profiles.items():
        print(f"\n== cProfile, {what}, 300 calls (tottime)")
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()

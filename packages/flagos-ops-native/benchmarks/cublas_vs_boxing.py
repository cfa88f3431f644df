"""cuBLAS bound from a manifest (flagos_ops_native/manifests/cublas.toml) against boxing
(which reaches cuBLAS through ATen's CUDA kernels), on the cuda HAL: results must match,
and the per-op time is printed side by side (native / boxing).

    FLAGOS_HAL=cuda python packages/flagos-ops-native/benchmarks/cublas_vs_boxing.py

Exit status 1 when the library did not load, a result differs, or a call did not run on
the provider asked for.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

MANIFESTS = Path(__file__).resolve().parents[1] / "python" / "flagos_ops_native" / "manifests"
os.environ.setdefault("FLAGOS_HAL", "cuda")
os.environ["FLAGOS_NATIVE_MANIFESTS"] = str(MANIFESTS / "cublas.toml")

import flagos
import torch

OPS = {"mm": "aten::mm", "bmm": "aten::bmm", "addmm": "aten::addmm"}
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}


def cases(dtype):
    d = {"device": "flagos", "dtype": dtype}
    a, b = torch.randn(512, 384, **d), torch.randn(384, 256, **d)
    big_a, big_b = torch.randn(4096, 4096, **d), torch.randn(4096, 4096, **d)
    x, y = torch.randn(16, 256, 64, **d), torch.randn(16, 64, 128, **d)
    bias = torch.randn(256, **d)
    return [
        ("mm 512x384x256", "mm", lambda: torch.mm(a, b)),
        ("mm a.t()", "mm", lambda: torch.mm(b.t(), a.t())),
        ("mm 4096^3", "mm", lambda: torch.mm(big_a, big_b)),
        ("bmm 16x256x64x128", "bmm", lambda: torch.bmm(x, y)),
        ("addmm bias", "addmm", lambda: torch.addmm(bias, a, b, beta=0.5, alpha=2.0)),
        ("linear", "addmm", lambda: torch.nn.functional.linear(a, b.t(), bias)),
    ]


def timed(fn, iters: int) -> float:
    fn()
    torch.flagos.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.flagos.synchronize()
    return (time.perf_counter() - t0) / iters * 1e6


def main() -> int:
    native = flagos.routing.providers()["native"]
    print("\n".join(native.status_lines()))
    if any(s.error for s in native.statuses):
        return 1
    ok = True
    print(f"{'case':<22} {'dtype':<9} {'native us':>10} {'boxing us':>10} {'ratio':>6}  match")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for name, op, fn in cases(dtype):
            route = {"aten::mm": ["native"], "aten::bmm": ["native"], "aten::addmm": ["native"]}
            with flagos.routing.override({k: ["boxing"] for k in route}):
                ref = fn()
                t_box = timed(fn, 20)
            flagos.routing.reset_stats()
            with flagos.routing.override(route):
                out = fn()
                stats = flagos.routing.stats()
                t_nat = timed(fn, 20)
            served = {k: v for k, v in stats.items() if k.startswith(OPS[op])}
            on_native = all(v.get("native", {}).get("calls") and not v.get("cpu")
                            for v in served.values()) and bool(served)
            rtol, atol = TOL[dtype]
            close = torch.allclose(out.cpu().float(), ref.cpu().float(), rtol=rtol,
                                   atol=atol * max(1.0, ref.abs().max().item()))
            ok &= close and on_native
            print(f"{name:<22} {str(dtype)[6:]:<9} {t_nat:10.1f} {t_box:10.1f} "
                  f"{t_nat / t_box:6.2f}  {'yes' if close else 'NO'}"
                  f"{'' if on_native else '  (not served by native: ' + str(served) + ')'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

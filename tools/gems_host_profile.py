"""Where the host time of one gems call goes: cProfile of N calls of an op through the
gems route on flagos beside the same op under ``flag_gems.use_gems()`` on CUDA tensors.

    FLAGOS_HAL=cuda python tools/gems_host_profile.py [--op mm] [--calls 2000] [--top 25]

Prints, for each side, the wall time per call and the functions with the most own time per
call (Python frames only: time in C++ shows up in the built-in that called it).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import flagos
import torch
import torch.nn.functional as F

OPS = {
    "mm": lambda a, b: torch.mm(a, b),
    "gelu": lambda a, b: F.gelu(a),
    "add": lambda a, b: torch.add(a, b),
    "softmax": lambda a, b: torch.softmax(a, -1),
}


def _profile(label: str, fn, a, b, calls: int, top: int, sync) -> None:
    for _ in range(50):
        fn(a, b)
    sync()
    t = time.perf_counter()
    for _ in range(calls):
        fn(a, b)
    sync()
    wall = (time.perf_counter() - t) / calls * 1e6
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn(a, b)
    sync()
    prof.disable()
    print(f"\n## {label}: {wall:.1f} us per call without the profiler")
    stats = pstats.Stats(prof)
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    print(f"{'own us/call':>11} {'cum us/call':>11} {'calls/call':>10}  function")
    for (file, line, name), (_cc, nc, tt, ct, _callers) in rows:
        print(f"{tt / calls * 1e6:11.2f} {ct / calls * 1e6:11.2f} {nc / calls:10.2f}  "
              f"{name} ({file.rsplit('/', 2)[-1] if '/' in file else file}:{line})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--op", default="mm", choices=sorted(OPS))
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    import flag_gems

    fn = OPS[args.op]
    cuda, fl = flagos.twin_device(0), torch.device("flagos", 0)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    with flag_gems.use_gems():
        _profile(f"FlagGems on CUDA tensors: {args.op}", fn, a.to(cuda), b.to(cuda),
                 args.calls, args.top, torch.cuda.synchronize)
    with flagos.routing.override({"default": ["gems", "boxing", "cpu"]}):
        _profile(f"flagos, gems route: {args.op}", fn, a.to(fl), b.to(fl), args.calls,
                 args.top, torch.flagos.synchronize)


if __name__ == "__main__":
    main()

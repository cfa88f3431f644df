"""A memory soak: many training steps on flagos:0 with memory snapshots; after warm-up,
allocated and reserved bytes, the HAL's free bytes and its live streams and events stay
flat (any growth is a leak). Each step also uses a side stream and events, so their
bookkeeping is soaked too.

    python integration_tests/memory_soak.py --steps 1000 --json memory_soak.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from fault_sweep import control, git_commit, machine

DEV = torch.device("flagos", 0)


def _live():
    """The sim HAL's live (streams, events) counter; None on other HALs."""
    if torch.flagos.get_device_properties(DEV).hal != "sim":
        return None
    return control().live


def soak(steps: int, every: int = 50, warmup: int = 20) -> dict:
    """Train for `steps`; a snapshot every `every` steps after `warmup`."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.LayerNorm(128), torch.nn.Linear(128, 10)).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    side = torch.flagos.Stream()
    live = _live()
    g = torch.Generator().manual_seed(1)
    snaps: list[list] = []
    start = time.monotonic()
    for step in range(1, steps + 1):
        x = torch.randn(32, 64, generator=g).to(DEV)
        y = torch.randint(0, 10, (32,), generator=g).to(DEV)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        ready = torch.flagos.Event()
        ready.record()
        side.wait_event(ready)
        with torch.flagos.stream(side):
            norm = torch.stack([p.detach().norm() for p in model.parameters()]).sum()
        norm.record_stream(torch.flagos.current_stream())
        torch.flagos.current_stream().wait_stream(side)
        value = loss.item() + norm.item()
        if step >= warmup and (step - warmup) % every == 0 or step == steps:
            torch.flagos.synchronize()
            streams, events = live() if live else (-1, -1)
            snaps.append([step, torch.flagos.memory_allocated(DEV),
                          torch.flagos.memory_reserved(DEV), torch.flagos.mem_get_info(DEV)[0],
                          streams, events, round(value, 4)])
    seconds = time.monotonic() - start
    cols = ["step", "allocated", "reserved", "hal_free", "live_streams", "live_events", "loss+norm"]
    growth = {c: max(s[i] for s in snaps) - min(s[i] for s in snaps)
              for i, c in enumerate(cols) if c in ("allocated", "reserved", "hal_free",
                                                   "live_streams", "live_events")}
    return {"columns": cols, "snapshots": snaps, "growth": growth, "seconds": seconds,
            "steps": steps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--every", type=int, default=50, help="steps between snapshots")
    ap.add_argument("--json", type=Path, help="write the benchmark JSON here")
    args = ap.parse_args(argv)
    r = soak(args.steps, args.every)
    for s in r["snapshots"]:
        print("  ".join(str(v) for v in s))
    flat = all(v == 0 for v in r["growth"].values())
    print(f"{args.steps} steps in {r['seconds']:.1f} s; growth after warm-up: {r['growth']}"
          f" -> {'flat' if flat else 'NOT FLAT'}")
    if args.json:
        doc = {"benchmark": "memory_soak",
               "title": f"Memory soak: {args.steps} training steps with a side stream, flagos:0",
               "machine": torch.flagos.get_device_name(DEV) + " on " + machine(),
               "torch": torch.__version__, "commit": git_commit(),
               "command": f"python integration_tests/memory_soak.py --steps {args.steps}",
               "columns": r["columns"], "rows": r["snapshots"],
               "notes": [("Snapshots after a 20-step warm-up; bytes of flagos:0 "
                         "(allocator statistics, HAL free bytes) and the HAL's live streams "
                         "and events (-1: the HAL cannot say)."),
                         (f"Growth between snapshots: {r['growth']} "
                         f"({'flat' if flat else 'not flat'}); {r['seconds']:.1f} s in all.")]}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())

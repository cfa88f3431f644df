"""A fault-injection sweep through the whole stack, on any HAL built on the HAL kit.

Two workloads run on flagos:0 once per injection point: a training step (forward,
backward, optimizer step, the loss copied to the host, empty_cache) and an inference step
with a side stream and events. An injection point is a HAL call kind of the kit's fault
injection (docs/hal/kit.md: sim, cuda, a vendor's HAL) at its k-th call within that workload, k = 1..N (or as many
calls as the workload makes). At every point:

- the failure reaches Python as an exception naming the HAL call and carrying the HAL's own
  error text (an allocation failure instead follows the out-of-memory contract: the cache
  is freed and the allocation retried, and a failed retry is ``torch.OutOfMemoryError``);
- nothing aborts or hangs (a watchdog ends the process with a traceback of every thread);
- the workload's inputs are intact, and every parameter holds either its value before the
  step or its value after it (no half-written tensor);
- the device is usable afterwards: the same step with faults off equals the CPU result;
- memory returns to its baseline: allocated and reserved bytes, the HAL's free bytes, and
  the HAL's live streams and events.

Run as a script for the longer, benchmark-style sweep; ``test_fault_sweep.py`` runs a CI
sized one. Opaque memory needs ``FLAGOS_NO_TWIN=1`` in the environment (read at load).

    python integration_tests/fault_sweep.py --first 20 --json faults.json
    python integration_tests/fault_sweep.py --hal cuda --first 3 --json faults-cuda.json
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import flagos_hal
import torch
from flagos_hal.fault_control import FaultControl

DEV = torch.device("flagos", 0)
# Enough steps to fill the stream pool (4 HAL streams per priority, created on first use)
# before the baseline, so the pool's streams are not counted as leaked. stream_create is
# then never called in a step; test_fault_sweep.py fails it where the pool creates one.
WARMUP_STEPS = 5
WATCHDOG_S = 60.0  # one injection point (a workload runs well under a second)
# The HAL calls each fault kind fails (its message names the call that failed).
CALLS = {"memcpy": ("memcpy", "memcpy_async"), "memset": ("memset", "memset_async"),
         "malloc_twice": ("malloc",)}
# Not a kit kind: an allocation and its retry fail (malloc:k and malloc:k+1).
TWICE = "malloc_twice"


def hal_name() -> str:
    """The HAL of flagos:0, the device the sweep runs on."""
    return torch.flagos.get_device_properties(DEV).hal


def injected() -> str:
    """The text the kit puts in an injected fault's message."""
    return f"injected fault (FLAGOS_{hal_name().upper()}_FAULT)"


def control() -> FaultControl:
    """The test control of the HAL library flagos loaded for flagos:0 (the same file);
    ValueError when that HAL is not built on the kit."""
    return FaultControl(flagos_hal.load(torch.flagos.get_device_properties(DEV).hal_path))


# ---- workloads ---------------------------------------------------------------------------

def _model(hidden: int = 16) -> torch.nn.Module:
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, 4))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def _data(batch: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(batch, 8, generator=g), torch.randn(batch, 4, generator=g)


class Train:
    """Forward, backward, an SGD step with momentum, the loss on the host, empty_cache.
    The hidden activations (96 x 4096 floats) are over the allocator's small size, so each
    step allocates a segment of its own and empty_cache returns it to the HAL."""

    name = "train"

    def __init__(self, device: torch.device) -> None:
        self.model = _model(hidden=4096).to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        x, y = _data(batch=96)
        self.x, self.y = x.to(device), y.to(device)
        self.inputs = {"x": x, "y": y}

    def params(self) -> list[torch.Tensor]:
        return list(self.model.parameters())

    def step(self) -> dict[str, torch.Tensor]:
        self.opt.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        out = {"loss": torch.tensor(loss.item())}  # the host copy of the loss
        if self.x.device.type == "flagos":
            torch.flagos.empty_cache()
        return out

    def device_inputs(self) -> dict[str, torch.Tensor]:
        return {"x": self.x, "y": self.y}


class Infer:
    """The model on a side stream, ordered by events; the result read on the host."""

    name = "infer"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.model = _model().to(device)
        x, _ = _data()
        self.x = x.to(device)
        self.inputs = {"x": x}

    def params(self) -> list[torch.Tensor]:
        return list(self.model.parameters())

    def step(self) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            if self.device.type != "flagos":
                y = self.model(self.x)
                return {"y": y.clone(), "s": y.sum(dim=0)}
            side = torch.flagos.Stream()
            ready, done = torch.flagos.Event(), torch.flagos.Event(enable_timing=True)
            ready.record()
            side.wait_event(ready)
            with torch.flagos.stream(side):
                y = self.model(self.x)
                done.record(side)
            torch.flagos.current_stream().wait_event(done)
            y.record_stream(torch.flagos.current_stream())
            s = torch.zeros(4, device=self.device)  # a memset
            s += y.sum(dim=0)
            side.query()
            done.query()
            done.synchronize()
            side.synchronize()
            torch.flagos.synchronize()
            return {"y": y.cpu(), "s": s.cpu()}

    def device_inputs(self) -> dict[str, torch.Tensor]:
        return {"x": self.x}


WORKLOADS: dict[str, Callable[[torch.device], Train | Infer]] = {"train": Train, "infer": Infer}


def reference(workload: str) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """The step's outputs and parameters after it, on the CPU."""
    w = WORKLOADS[workload](torch.device("cpu"))
    out = w.step()
    return out, [p.detach().clone() for p in w.params()]


# ---- one injection point -----------------------------------------------------------------

@dataclass
class Point:
    workload: str
    kind: str
    call: int  # the call of `kind`, counted within the workload, that fails
    outcome: str = ""  # "raised", "retried" (allocation), "oom" (allocation, twice)
    problems: list[str] = field(default_factory=list)
    message: str = ""

    @property
    def survived(self) -> bool:
        return not self.problems


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def _outputs_match(out: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> bool:
    return all(_close(out[k].cpu(), v) for k, v in ref.items())


def touch_default_streams() -> None:
    """Makes every device's default HAL stream exist. They are created on first use, and
    after a device fault flagos probes each device through it (docs/faults.md): created
    there, they would count as leaked streams."""
    for i in range(torch.flagos.device_count()):
        torch.flagos.default_stream(i).query()


def _settle() -> None:
    gc.collect()
    torch.flagos.synchronize()
    torch.flagos.empty_cache()


@dataclass
class Baseline:
    allocated: int
    reserved: int
    hal_free: int
    live: tuple[int, int]

    @staticmethod
    def now(ctl: FaultControl) -> Baseline:
        _settle()
        return Baseline(torch.flagos.memory_allocated(DEV), torch.flagos.memory_reserved(DEV),
                        torch.flagos.mem_get_info(DEV)[0], ctl.live())


def _drop_traceback(err: BaseException) -> None:
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if err.__traceback__ is not None:
            traceback.clear_frames(err.__traceback__)
        err.__traceback__ = None
        err = err.__cause__ or err.__context__


def _check_message(p: Point, err: BaseException) -> None:
    msg = str(err)
    p.message = msg.splitlines()[0][:300] if msg else type(err).__name__
    calls = CALLS.get(p.kind, (p.kind,))
    if not any(f"{c}: {injected()}" in msg for c in calls):
        p.problems.append(f"the message does not carry the HAL's error text: {p.message}")
    if f"HAL '{hal_name()}'" not in msg:
        p.problems.append(f"the message does not name the HAL: {p.message}")
    status = "out of memory" if p.kind in ("malloc", "host_malloc", TWICE) else "device fault"
    if status not in msg:
        p.problems.append(f"the message lacks the status text '{status}': {p.message}")


def _check_intact(p: Point, w: Train | Infer, before: list[torch.Tensor],
                  after: list[torch.Tensor]) -> None:
    """The step's inputs are unchanged; each parameter is as before or after the step."""
    for name, t in w.device_inputs().items():
        try:
            if not torch.equal(t.cpu(), w.inputs[name]):
                p.problems.append(f"input {name} changed")
        except Exception as e:  # noqa: BLE001
            p.problems.append(f"input {name} cannot be read back: {e}")
    for i, (t, b, a) in enumerate(zip(w.params(), before, after)):
        v = t.detach().cpu()
        if not (_close(v, b) or _close(v, a)):
            p.problems.append(f"parameter {i} is neither its value before nor after the step")


def _check_usable(p: Point, workload: str, ref_out: dict[str, torch.Tensor],
                  ref_params: list[torch.Tensor]) -> None:
    """The same step, faults off, equals the CPU."""
    try:
        again = WORKLOADS[workload](DEV)
        out = again.step()
        for k, v in ref_out.items():
            if not _close(out[k].cpu(), v):
                p.problems.append(f"after the fault, the step's {k} differs from the CPU")
        for i, (t, a) in enumerate(zip(again.params(), ref_params)):
            if not _close(t.detach().cpu(), a):
                p.problems.append(f"after the fault, parameter {i} differs from the CPU")
    except Exception as e:  # noqa: BLE001
        p.problems.append(f"the device is not usable after the fault: {type(e).__name__}: {e}")
        _drop_traceback(e)


def run_point(ctl: FaultControl, workload: str, kind: str, call: int, base: Baseline,
              ref: tuple[dict[str, torch.Tensor], list[torch.Tensor]]) -> Point:
    """Fail call `call` of `kind` inside one step of `workload` and check the aftermath."""
    p = Point(workload, kind, call)
    w = WORKLOADS[workload](DEV)
    before = [t.detach().cpu() for t in w.params()]
    ref_out, ref_params = ref
    is_alloc = kind in ("malloc", "host_malloc", TWICE)
    stats0 = torch.flagos.memory_stats(DEV)
    # TWICE: an allocation and the retry after it both fail (the out-of-memory error).
    spec = f"malloc:{call},malloc:{call + 1}" if kind == TWICE else f"{kind}:{call}"
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    err: BaseException | None = None
    try:
        ctl.arm(spec)
        try:
            out = w.step()
        except Exception as e:  # noqa: BLE001 - every failure is judged below
            err = e
        finally:
            ctl.disarm()
        if err is None:
            torch.flagos.synchronize()
    finally:
        faulthandler.cancel_dump_traceback_later()
    stats1 = torch.flagos.memory_stats(DEV)
    retries = stats1.get("num_alloc_retries", 0) - stats0.get("num_alloc_retries", 0)
    ooms = stats1.get("num_ooms", 0) - stats0.get("num_ooms", 0)
    if err is None:
        if kind in ("malloc", TWICE):
            # Retried after freeing the cache, or a kernel's temporary that took host memory
            # instead (host-addressable memory): either way the step's results are right.
            p.outcome = "retried" if retries else "absorbed"
            if not _outputs_match(out, ref_out):
                p.problems.append("after a failed allocation, the step's results differ from "
                                  "the CPU's")
        elif kind == "event_record" and _outputs_match(out, ref_out):
            # The event a free records on a record_stream user: a free cannot raise (it runs
            # in a deleter), so it waits for that stream instead.
            p.outcome = "absorbed"
        else:
            p.outcome = "no error"
            p.problems.append(f"call {call} of {kind} failed and the step went on without an error")
    else:
        p.outcome = "raised"
        _check_message(p, err)
        if kind == "malloc":
            p.problems.append("a single failed allocation was not retried")
        elif kind == TWICE:
            if not isinstance(err, torch.OutOfMemoryError):
                p.problems.append(f"an allocation failure raised {type(err).__name__}, not "
                                  "torch.OutOfMemoryError")
            elif not (retries >= 1 and ooms >= 1):
                p.problems.append(f"OOM without the retry (retries {retries}, ooms {ooms})")
            else:
                p.outcome = "oom"
                if "allocated" not in str(err) or "reserved" not in str(err):
                    p.problems.append("the OOM message lacks the numbers (allocated, reserved)")
        elif isinstance(err, torch.OutOfMemoryError) and not is_alloc:
            p.problems.append(f"a {kind} fault raised torch.OutOfMemoryError")
        _drop_traceback(err)  # its frames hold the failed step's tensors
        del err
    _check_intact(p, w, before, ref_params)
    del w
    _check_usable(p, workload, ref_out, ref_params)
    # Memory and HAL objects are back to the baseline.
    try:
        now = Baseline.now(ctl)
    except Exception as e:  # noqa: BLE001
        p.problems.append(f"cannot settle the device: {e}")
        return p
    # A real chip's free memory is the whole device's: other processes and the twin's own
    # caching allocator move it. There flagos' allocated and reserved bytes are the measure.
    checked = ("allocated", "reserved", "live") + (("hal_free",) if hal_name() == "sim" else ())
    for what in checked:
        a, b = getattr(base, what), getattr(now, what)
        if a != b:
            p.problems.append(f"{what} went from {a} to {b}")
    return p


# ---- the sweep ---------------------------------------------------------------------------

def calls_per_step(ctl: FaultControl, workload: str) -> dict[str, int]:
    """How many calls of each kind one step of `workload` makes (faults off), from the
    state every injection point starts in (caches emptied)."""
    _settle()
    w = WORKLOADS[workload](DEV)
    ctl.disarm()
    before = ctl.counts()
    w.step()
    after = ctl.counts()  # calls are counted when made, before the queued work runs
    torch.flagos.synchronize()
    return {k: after[k] - before[k] for k in ctl.kinds}


def sweep(first: int, workloads: list[str], kinds: list[str] | None = None,
          verbose: bool = False) -> dict:
    ctl = control()
    kinds = kinds or [*ctl.kinds, TWICE]
    points: list[Point] = []
    counts: dict[str, dict[str, int]] = {}
    start = time.monotonic()
    for workload in workloads:
        ref = reference(workload)
        touch_default_streams()
        for _ in range(WARMUP_STEPS):  # streams, pools, caches created once
            calls_per_step(ctl, workload)
        counts[workload] = calls_per_step(ctl, workload)
        counts[workload][TWICE] = counts[workload]["malloc"]
        base = Baseline.now(ctl)
        for kind in kinds:
            # Calls are counted within the step: run_point builds the workload (model,
            # data, optimizer) before it arms the fault.
            n = counts[workload]["malloc" if kind == TWICE else kind]
            for call in range(1, min(first, n) + 1):
                if verbose:
                    print(f"{workload} {kind}:{call}", file=sys.stderr, flush=True)
                points.append(run_point(ctl, workload, kind, call, base, ref))
    return {"mode": "opaque" if os.environ.get("FLAGOS_NO_TWIN") == "1" else "host",
            "first": first, "calls_per_step": counts, "machine": machine(hal_name()),
            "points": [asdict(p) | {"survived": p.survived} for p in points],
            "seconds": time.monotonic() - start}


def summary_rows(results: list[dict]) -> list[list]:
    """Per mode, workload and kind: calls per step, points tried, survived, outcomes."""
    rows = []
    for r in results:
        for workload, per_kind in r["calls_per_step"].items():
            for kind, calls in per_kind.items():
                pts = [p for p in r["points"] if p["workload"] == workload and p["kind"] == kind]
                outcomes = sorted({p["outcome"] for p in pts})
                rows.append([r["mode"], workload, kind, calls, len(pts),
                             sum(p["survived"] for p in pts), ",".join(outcomes)])
    return rows


def machine(hal: str = "sim") -> str:
    """The device's name on a HAL of a real chip; the CPU model on sim (it runs on the
    CPU), else the architecture."""
    if hal != "sim":
        props = torch.flagos.get_device_properties(DEV)
        return props.name
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str:
    """FLAGOS_COMMIT (a copied tree names its commit so), else the checkout's short commit,
    else "unknown"."""
    if os.environ.get("FLAGOS_COMMIT"):
        return os.environ["FLAGOS_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_mode(first: int, opaque: bool, workloads: list[str] | None = None,
             kinds: list[str] | None = None, hal: str = "sim") -> dict:
    """The sweep in a process of its own on HAL `hal`, on host-addressable or opaque
    memory."""
    env = dict(os.environ, FLAGOS_HAL=hal)
    env.pop("FLAGOS_NO_TWIN", None)
    env.pop(f"FLAGOS_{hal.upper()}_FAULT", None)
    if opaque:
        env["FLAGOS_NO_TWIN"] = "1"
    cmd = [sys.executable, __file__, "--one-mode", "--first", str(first),
           "--workloads", *(workloads or WORKLOADS)]
    if kinds:
        cmd += ["--kinds", *kinds]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    marker = "FAULT-SWEEP-RESULT "
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(marker)), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"sweep ({'opaque' if opaque else 'host'} memory) exited with "
                           f"{proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return json.loads(line[len(marker):])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--first", type=int, default=20, help="calls per kind to fail (k = 1..N)")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--kinds", nargs="+", default=None, help="fault kinds (default: all)")
    ap.add_argument("--json", type=Path, help="write the benchmark JSON here")
    ap.add_argument("--hal", default=os.environ.get("FLAGOS_HAL", "sim"),
                    help="the HAL to sweep (a HAL built on the kit; default: FLAGOS_HAL, else sim)")
    ap.add_argument("--memory", nargs="+", choices=["host", "opaque"], default=["host", "opaque"],
                    help="host-addressable memory, opaque memory (FLAGOS_NO_TWIN=1)")
    ap.add_argument("--verbose", action="store_true", help="name each point as it runs")
    ap.add_argument("--one-mode", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one_mode:  # a child: the memory mode is this process's environment
        result = sweep(args.first, args.workloads, args.kinds, args.verbose)
        print("FAULT-SWEEP-RESULT " + json.dumps(result), flush=True)
        return 0
    results = [run_mode(args.first, mode == "opaque", args.workloads, args.kinds, args.hal)
               for mode in args.memory]
    rows = summary_rows(results)
    failed = [(r["mode"], p) for r in results for p in r["points"] if not p["survived"]]
    tried = sum(len(r["points"]) for r in results)
    for row in rows:
        print("  ".join(str(c) for c in row))
    print(f"{tried} injection points, {tried - len(failed)} survived")
    for mode, p in failed:
        print(f"FAILED {mode} {p['workload']} {p['kind']}:{p['call']}: {'; '.join(p['problems'])}")
    if args.json:
        cmd = f"python integration_tests/fault_sweep.py --hal {args.hal} --first {args.first}"
        if args.memory != ["host", "opaque"]:
            cmd += " --memory " + " ".join(args.memory)
        doc = {"benchmark": "fault_sweep",
               "title": "Fault-injection sweep: HAL call failures under a training and an "
                        f"inference step, {args.hal} HAL",
               "machine": results[0]["machine"],
               "torch": torch.__version__, "commit": git_commit(), "command": cmd,
               "columns": ["memory", "workload", "fault kind", "calls per step",
                           "points tried", "survived", "outcomes"],
               "rows": rows,
               "notes": [("A point fails one HAL call (the k-th of its kind within one step, "
                         f"k = 1..{args.first}); it survives when the error reaches Python "
                         "naming the call with the HAL's text, inputs are intact, the device "
                         "then computes the step as the CPU does, and memory, streams and "
                         "events return to the baseline."),
                         ("Outcomes: raised (an exception), retried (an allocation failure "
                         "absorbed by freeing the cache and retrying), absorbed (a kernel's "
                         "temporary took host memory instead, or a free waited for a "
                         "record_stream user's stream because its event could not be "
                         "recorded; results equal the CPU's), oom (the retry failed too: "
                         "torch.OutOfMemoryError)."),
                         f"{tried} points tried, {tried - len(failed)} survived."]}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

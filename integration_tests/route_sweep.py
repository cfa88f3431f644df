"""The route sweep: no route kills the process.

For each installed provider alone (with the CPU fallback behind it), for the CPU fallback
alone, for the shipped defaults and for every routing file a package ships (entry-point
group ``flagos.routes``), a small Llama training step (forward, cross-entropy, backward,
AdamW step, twice) runs on flagos:0 in a process of its own, on host-addressable memory
and on opaque memory (``FLAGOS_NO_TWIN=1``). Each case ends in one of:

- ``match``: the losses and the updated parameters equal the CPU run's (within the
  tolerance of float32 kernels that sum in another order);
- ``error``: a Python exception whose message names the op (``aten::...``) and the
  provider or engine that refused it; the step did not silently compute something else;

and never in ``mismatch`` (a wrong result), ``unnamed error`` (an exception that does not
say which op), ``crash`` (the process died on a signal) or ``hang`` (no result in time).

    python integration_tests/route_sweep.py                 # every case, on FLAGOS_HAL
    python integration_tests/route_sweep.py --memory host --json routes.json

``test_route_sweep.py`` runs it in CI on sim; ``tools/gpu_check.sh routes`` on the cuda HAL.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib import metadata

GOOD = ("match", "error")
MEMORY = {"host": {}, "opaque": {"FLAGOS_NO_TWIN": "1"}}
TIMEOUT_S = 300.0
STEPS = 2  # the second step reads the optimizer state the first one wrote


@dataclass
class Case:
    """One route on one kind of memory."""

    name: str  # "gems alone", "file gems", "defaults", "cpu alone"
    memory: str  # a key of MEMORY
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    case: str
    memory: str
    outcome: str  # match, error, mismatch, unnamed error, crash, hang
    detail: str = ""
    seconds: float = 0.0


def installed_providers() -> list[str]:
    """The providers a fresh process has: the installed ones, not those a caller (a test)
    registered in this process, which the children running the cases would not know."""
    code = "import json, flagos; print(json.dumps(sorted(flagos.routing.providers())))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=TIMEOUT_S)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cases(memories: list[str]) -> list[Case]:
    """Every route to sweep, on each kind of memory in `memories`."""
    routes: list[tuple[str, dict[str, str]]] = [("defaults", {})]
    routes.append(("cpu alone", {"FLAGOS_ROUTES": "default=cpu"}))
    for name in installed_providers():
        if name != "cpu":
            routes.append((f"{name} alone", {"FLAGOS_ROUTES": f"default={name},cpu"}))
    for ep in sorted(metadata.entry_points(group="flagos.routes"), key=lambda e: e.name):
        routes.append((f"file {ep.name}", {"FLAGOS_ROUTES_FILE": ep.name}))
    return [Case(name, memory, {**env, **MEMORY[memory]}) for memory in memories
            for name, env in routes]


# ---- the child: one training step on flagos against the CPU -------------------------------

def _step(model, tokens, steps: int) -> list[float]:
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model.loss(tokens)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().cpu()))
    return losses


def child() -> dict:
    """Runs the step on the CPU and on flagos:0; returns what a case's outcome is made of."""
    import copy

    import torch
    from flagos.models.llama import LlamaConfig, TinyLlama

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, hidden_dim=64, max_seq_len=16)
    model = TinyLlama(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (2, 9))
    on_flagos = copy.deepcopy(model).to("flagos")
    want = _step(model, tokens, STEPS)
    try:
        got = _step(on_flagos, tokens.to("flagos"), STEPS)
    except Exception as e:  # noqa: BLE001 - the outcome is the exception, classified below
        return {"raised": f"{type(e).__name__}: {e}"}
    worst = 0.0
    for (name, p), q in zip(model.named_parameters(), on_flagos.parameters()):
        diff = (p.detach() - q.detach().cpu()).abs().max().item()
        worst = max(worst, diff)
        if not torch.allclose(p.detach(), q.detach().cpu(), rtol=1e-3, atol=1e-4):
            return {"mismatch": f"parameter {name} differs by up to {diff:.3g} after {STEPS} steps"}
    if not all(abs(a - b) <= 1e-4 * max(1.0, abs(a)) for a, b in zip(want, got)):
        return {"mismatch": f"losses {got} on flagos, {want} on the CPU"}
    return {"match": f"losses {[f'{x:.5f}' for x in got]}, parameters within {worst:.2g}"}


# ---- the parent ---------------------------------------------------------------------------

_NAMES_OP = re.compile(r"aten::\w+|\baten\.\w+|flagos_\w+::\w+")


def classify(result: dict, providers: list[str]) -> tuple[str, str]:
    """A child's result as (outcome, detail)."""
    if "match" in result:
        return "match", result["match"]
    if "mismatch" in result:
        return "mismatch", result["mismatch"]
    text = result["raised"]
    first = text.splitlines()[0][:400] if text else ""
    names_provider = any(p in text for p in providers) or "engine" in text
    if _NAMES_OP.search(text) and names_provider:
        return "error", first
    return "unnamed error", text[:2000]


def run_case(case: Case, providers: list[str], timeout: float = TIMEOUT_S) -> Outcome:
    env = {**os.environ, **case.env, "PYTHONUNBUFFERED": "1",
           "FLAGOS_ROUTE_SWEEP_DUMP_S": str(max(5.0, timeout - 15))}
    for var in ("FLAGOS_ROUTES", "FLAGOS_ROUTES_FILE", "FLAGOS_NO_TWIN"):
        if var not in case.env:
            env.pop(var, None)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-X", "faulthandler", __file__, "--child"],
                              env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as e:
        tail = (e.stderr or b"")[-6000:]
        return Outcome(case.name, case.memory, "hang", f"no result in {timeout:.0f} s: {tail!r}",
                       time.perf_counter() - t0)
    seconds = time.perf_counter() - t0
    if proc.returncode < 0:
        return Outcome(case.name, case.memory, "crash",
                       f"signal {-proc.returncode}: {proc.stderr[-3000:]}", seconds)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        return Outcome(case.name, case.memory, "unnamed error",
                       f"exit code {proc.returncode}: {proc.stderr[-3000:]}", seconds)
    outcome, detail = classify(json.loads(line[len("RESULT "):]), providers)
    return Outcome(case.name, case.memory, outcome, detail, seconds)


def sweep(memories: list[str], jobs: int, only: str | None = None) -> list[Outcome]:
    providers = installed_providers()
    todo = [c for c in cases(memories) if only is None or only in c.name]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda c: run_case(c, providers), todo))


def table(outcomes: list[Outcome]) -> str:
    rows = ["| route | memory | outcome | s | detail |", "|---|---|---|---:|---|"]
    for o in outcomes:
        detail = o.detail.splitlines()[0][:160] if o.detail else ""
        rows.append(f"| {o.case} | {o.memory} | {o.outcome} | {o.seconds:.1f} | {detail} |")
    return "\n".join(rows)


def report(outcomes: list[Outcome], memories: list[str] | None = None) -> dict:
    """The outcomes as a benchmark-style table (tools/bench_report.py, docs/benchmarks.md)."""
    import torch
    from fault_sweep import git_commit, machine

    hal = torch.flagos.get_device_properties(0).hal
    command = f"FLAGOS_HAL={hal} python integration_tests/route_sweep.py"
    for m in memories or []:
        command += f" --memory {m}"
    good = sum(o.outcome in GOOD for o in outcomes)
    return {"benchmark": "route_sweep",
            "title": f"Route sweep: a training step on every route, {hal} HAL",
            "machine": machine(hal), "torch": torch.__version__, "commit": git_commit(),
            "command": command, "columns": ["route", "memory", "outcome", "seconds", "detail"],
            "rows": [[o.case, o.memory, o.outcome, round(o.seconds, 1),
                      (o.detail.splitlines() or [""])[0][:160]] for o in outcomes],
            "notes": [("A route runs a small Llama's forward, backward and AdamW step twice in "
                       "a process of its own: it must match the CPU, or raise an error naming the "
                       "op and the provider; never crash or hang."),
                      f"{good} of {len(outcomes)} routes ran or raised a named error."],
            "outcomes": [asdict(o) for o in outcomes]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--memory", action="append", choices=sorted(MEMORY),
                    help="kinds of memory (default: host and opaque)")
    ap.add_argument("--only", help="only the routes whose name contains this")
    ap.add_argument("--jobs", type=int, default=max(1, min(4, (os.cpu_count() or 2))))
    ap.add_argument("--json", help="write the outcomes here")
    args = ap.parse_args(argv)
    if args.child:
        # A hang shows where it hung: every thread's stack, before the parent gives up.
        faulthandler.dump_traceback_later(float(os.environ.get("FLAGOS_ROUTE_SWEEP_DUMP_S", "280")))
        print("RESULT " + json.dumps(child()), flush=True)
        return 0
    outcomes = sweep(args.memory or sorted(MEMORY), args.jobs, args.only)
    print(table(outcomes))
    bad = [o for o in outcomes if o.outcome not in GOOD]
    for o in bad:
        print(f"\n{o.case} ({o.memory}): {o.outcome}\n{o.detail}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report(outcomes, args.memory), f, indent=1)
    print(f"\n{len(outcomes) - len(bad)} of {len(outcomes)} cases ran or raised a named error")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

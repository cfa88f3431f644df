"""Which calls of a model FlagGems would serve on a chip without a twin, read on sim.

Without a twin (``FLAGOS_NO_TWIN=1``), a call that the gems provider does not serve goes
to the CPU fallback: every tensor of it through host memory. This reads, for each call of
a model's step, what the gems provider would do with it on a Hopper GPU without a twin,
without running a single FlagGems kernel: FlagGems 5.0's op table is loaded as the cuda
HAL's target would load it (NVIDIA configs, compute capability 9, its Hopper kernels),
each call is classified by that table, the guards of ``flagos_ops_gems._kernel_guards``
(with the arguments of the call) and the package's own kernels, then declined, so that
the CPU fallback computes it:

- ``served``: FlagGems' kernel computes it;
- ``own``: a guard declines it and an own kernel of flagos-ops-gems takes the op, or
  FlagGems lacks the op and an own kernel serves it;
- ``declined``: a guard declines it and nothing else on the device takes it;
- ``cpu``: it reaches the CPU fallback without the provider having a kernel for it.

Out= forms of ops the provider was offered reach the fallback here only because the
probe declined their functional form (the composite kernel then runs), and are not
counted. What the probe cannot see: a FlagGems wrapper raising on a call at run time (a
functional op's call is then declined to the fallback too).

    FLAGOS_NO_TWIN=1 FLAGOS_HAL=sim python integration_tests/models/no_twin_coverage.py \\
        tinyllama Llama "UNet2DModel"

prints each case's counts as JSON (needs flag-gems installed; the test
``test_no_twin_coverage.py`` runs it); ``--json PATH`` also writes them as a results table
(docs/bench/results/sim/no-twin-coverage.json, on docs/benchmarks.md).
"""

from __future__ import annotations

import collections
import json
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("ARCH", "sm_90")  # FlagGems' Hopper kernels, as on an H100/H200
os.environ["TRITON_INTERPRET"] = "0"  # FlagGems' kernel decorators refuse the interpreter
sys.path.insert(0, str(Path(__file__).resolve().parent))

import flagos
import torch


def _probe_library(seen: collections.Counter):
    import flagos_ops_gems._flag_gems as loader
    from flagos_ops_gems import FlagGems, own_kernels
    from flagos_ops_gems._kernel_guards import computes_exactly

    # sim names no Triton target: FlagGems is loaded as the cuda HAL's target loads it
    loader.vendor_and_backend = lambda index=0: ("nvidia", "cuda", (9, 0))

    class Probe(FlagGems):
        name = "gems probe"

        def load(self):
            table, devices = super().load()
            probes = {}
            for op in table:
                raw = self.functions.get(op)  # FlagGems' own function (adapters have none)

                def probe(*args, _op=op, _raw=raw, **kwargs):
                    if _raw is None and _op in own_kernels.OPS:
                        verdict = "own"  # an op FlagGems lacks, in its table as an own kernel
                    elif _raw is None or computes_exactly(_raw, *args, **kwargs):
                        verdict = "served"
                    else:
                        verdict = "own" if _op in own_kernels.OPS else "declined"
                    seen[(_op, verdict)] += 1
                    return NotImplemented  # the CPU fallback computes the call

                probes[op] = probe
            return probes, devices

    return Probe()


def _to_flagos(x):
    if isinstance(x, torch.Tensor):
        return x.to("flagos")
    if isinstance(x, dict):
        return {k: _to_flagos(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_to_flagos(v) for v in x)
    return x


def _tinyllama_step():
    from flagos.models import LlamaConfig, TinyLlama
    from flagos.models.clean_process import train_step

    cfg = LlamaConfig(dim=1024, n_layers=1, n_heads=16, hidden_dim=2816, max_seq_len=65,
                      vocab_size=32000)
    torch.manual_seed(0)
    model = TinyLlama(cfg).to(device="flagos", dtype=torch.bfloat16)
    tokens = torch.randint(0, cfg.vocab_size, (1, 65)).to("flagos")
    return lambda: train_step(model, tokens)


def _zoo_forward(name: str):
    from zoo_cases import CASES

    case = CASES[name]
    torch.manual_seed(0)
    model = case.build().to("flagos")
    inputs = case.inputs()
    seed = inputs.pop("seed", None)  # a pipeline: its noise drawn from a seeded CPU generator
    inputs = _to_flagos(inputs)

    def run():
        with torch.no_grad():
            if seed is not None:
                return model(generator=torch.Generator("cpu").manual_seed(seed), output_type="pt",
                             **inputs)
            return case.forward(model, inputs) if case.forward else model(**inputs)

    return run


def _base(op: str) -> str:
    """An op's name without overload and in-place mark: ``clamp_`` and ``clamp.out`` share
    ``clamp`` (an in-place call the probe declines runs its out= form on the CPU)."""
    return op.split(".")[0].rstrip("_")


def coverage(names: list[str]) -> dict[str, dict[str, dict[str, int]]]:
    """For each case ("tinyllama": flagos.bench's Llama stack, one layer, a training step
    in bf16; otherwise a zoo case's forward, or its pipeline's call), the calls by verdict
    and op."""
    from flagos_ops_gems import register_library

    seen: collections.Counter = collections.Counter()
    flagos.routing.register_provider(register_library("gemsprobe", _probe_library(seen)))
    report = {}
    for name in names:
        step = _tinyllama_step() if name == "tinyllama" else _zoo_forward(name)
        with flagos.routing.override({"default": ["gemsprobe", "cpu"]}), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step()  # the first call loads the library and resolves the routes
            seen.clear()
            flagos.routing.reset_stats()
            step()
            stats = flagos.routing.stats()
        offered = {_base(op) for op, _ in seen}
        verdicts: dict[str, dict[str, int]] = {"served": {}, "own": {}, "declined": {}, "cpu": {}}
        for (op, v), n in seen.items():
            verdicts[v][op] = verdicts[v].get(op, 0) + n
        for op, per in stats.items():
            calls = per.get("cpu", {}).get("calls", 0)
            if calls and _base(op) not in offered:
                verdicts["cpu"][op] = calls
        report[name] = verdicts
    return report


def table(report: dict[str, dict[str, dict[str, int]]]):
    """The report as a results table (docs/benchmarks.md): calls per verdict per case."""
    import flag_gems
    from flagos.bench_results import Table

    t = Table("no-twin-coverage", (
        f"without a twin: each call of a model's step, read against FlagGems "
        f"{flag_gems.__version__}'s op table and guards (Hopper kernels) and flagos-ops-gems' "
        "own kernels, on sim (no FlagGems kernel runs)"),
        ["model", "FlagGems calls", "own-kernel calls", "declined calls", "CPU fallback calls",
         "own kernels used"])
    for case, v in report.items():
        t.add(case, *(sum(v[k].values()) for k in ("served", "own", "declined", "cpu")),
              ", ".join(sorted(op.removeprefix("aten::") for op in v["own"])) or "-")
    t.notes.append("declined or CPU-fallback calls by op: " + ("; ".join(
        f"{case}: " + ", ".join(f"{op} {n}" for op, n in sorted({**v['declined'], **v['cpu']}.items()))
        for case, v in report.items() if v["declined"] or v["cpu"]) or "none"))
    return t


def main(argv: list[str]) -> int:
    out = None
    if "--json" in argv:
        i = argv.index("--json")
        out, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    report = coverage(argv or ["tinyllama"])
    print(json.dumps(report, indent=1, sort_keys=True))
    if out:
        from flagos.bench_results import write_json

        write_json(out, [table(report)])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

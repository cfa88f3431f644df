"""Which of FlagGems' ops flagos relaunches from C++ without a twin: proven per op, kept as
data.

Without a twin a ``gems`` call runs FlagGems' Python wrapper on the flagos tensors and
its Triton kernels launch through the HAL. Where the wrapper's launches are a function
of the arguments' metadata (sizes, strides, dtypes, other arguments' values), the launch
cache records a call's launches and repeats them from C++ for later calls with the same
key, without Python (:func:`flagos.provider_api.set_replayable`). Which ops qualify is
data, ``replayable.toml`` next to this module, and each entry is proven, not assumed:
:func:`check_op` runs the op's OpInfo samples, each also non-contiguous (and
channels-last where 4-d), three times through the provider with the op declared
replayable (an autotuned kernel's first call times its configs and is not kept; the next
is). The three calls must be equal exactly, the first must match the CPU, and at least
one call must have been relaunched from C++. An entry keeps a digest of the
FlagGems source serving the op (its module and FlagGems' shared kernel machinery), so an
op that a FlagGems release changes drops out until it is admitted again.

    FLAGOS_NO_TWIN=1 FLAGOS_HAL=cuda python -m flagos_ops_gems.replay_admission \\
        [--ops aten::add.Tensor,...|training-step] [--max-samples N] [--write [PATH]]

runs the check on a device without a twin whose HAL names a Triton target, prints each
op's verdict and with ``--write`` puts the admitted ops in ``replayable.toml``. The first
call of each new shape of an autotuned op compiles and times every configuration, which
for a matrix product is minutes: ``--jobs N`` checks each (op, dtype) in its own process,
N at a time, and ``--task-timeout S`` stops one that takes longer than S seconds (its op is
not admitted, and the others go on), ``--deadline S`` stops them all S seconds after the
start (what was admitted by then is written). Those processes tune on copies of FlagGems' caches:
configs timed while they share the GPU are not kept. Triton's compiled kernels are.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import inspect
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import tomllib

__all__ = ["REPLAYABLE_FILE", "TRAINING_STEP_OPS", "Verdict", "check_op", "merge_admitted",
           "opinfo_samples", "read_admitted", "source_digest", "write_admitted"]

REPLAYABLE_FILE = Path(__file__).parent / "replayable.toml"
"""The admitted ops: ``"aten::add.Tensor" = "<digest>"`` under ``[ops]``."""

Sample = tuple[tuple, dict]

TRAINING_STEP_OPS = (
    "aten::add.Tensor", "aten::mul.Tensor", "aten::mm", "aten::bmm", "aten::_softmax",
    "aten::_log_softmax", "aten::native_layer_norm", "aten::rms_norm", "aten::_fused_rms_norm",
    "aten::sum", "aten::sum.dim_IntList", "aten::mean.dim", "aten::embedding", "aten::silu",
    "aten::gelu", "aten::rsqrt", "aten::pow.Tensor_Scalar", "aten::neg", "aten::sub.Tensor",
    "aten::div.Tensor", "aten::div.Scalar", "aten::cat", "aten::index_select", "aten::triu",
    "aten::masked_fill.Scalar", "aten::where.self", "aten::nll_loss_forward",
    "aten::_softmax_backward_data", "aten::_log_softmax_backward_data", "aten::silu_backward",
    "aten::embedding_dense_backward",
)
"""The ops of a transformer's training step that ``--ops training-step`` checks: those of
``flagos.bench``'s model benchmark, forward and backward, and of its host-cost table."""


def read_admitted(path: Path = REPLAYABLE_FILE) -> dict[str, str]:
    """The admitted ops and their source digests (empty when the file is absent)."""
    if not path.exists():
        return {}
    with path.open("rb") as f:
        return dict(tomllib.load(f).get("ops", {}))


def merge_admitted(previous: dict[str, str], checked: Iterable[str],
                   admitted: dict[str, str]) -> dict[str, str]:
    """The list after a run that checked ``checked`` and admitted ``admitted``: the ops it
    did not check keep their entries in ``previous``; those it checked are in it only if
    admitted now."""
    checked = set(checked)
    return {**{op: d for op, d in previous.items() if op not in checked}, **admitted}


def write_admitted(admitted: dict[str, str], library: str, path: Path = REPLAYABLE_FILE) -> None:
    """Write ``admitted`` (op -> digest) to ``path``, naming the library release checked."""
    lines = ["# FlagGems ops whose calls flagos relaunches from C++ on devices without a twin,",
             "# each admitted by `python -m flagos_ops_gems.replay_admission --write`; the value",
             "# is a digest of the FlagGems source serving the op (flagos_ops_gems.replay_admission).",
             f"# Checked with {library}.", "", "[ops]"]
    lines += [f'"{op}" = "{digest}"' for op, digest in sorted(admitted.items())]
    path.write_text("\n".join(lines) + "\n")


_SHARED: dict[str, str] = {}


def source_digest(fn: Callable[..., object]) -> str:
    """A digest of the source serving ``fn``: its module's and its package's shared kernel
    machinery (``<package>/utils``), so that a release changing either changes it."""
    module = inspect.getmodule(inspect.unwrap(fn))
    if module is None:
        return ""
    try:
        own = inspect.getsource(module)
    except (OSError, TypeError):  # generated code, no source file
        return ""
    package = module.__name__.partition(".")[0]
    if package not in _SHARED:
        root = Path(sys.modules[package].__file__).parent / "utils"
        h = hashlib.sha256()
        for f in sorted(root.rglob("*.py")) if root.is_dir() else ():
            h.update(f.read_bytes())
        _SHARED[package] = h.hexdigest()
    return hashlib.sha256((own + _SHARED[package]).encode()).hexdigest()[:24]


@dataclasses.dataclass
class Verdict:
    """The check of one op: admitted or not, and why."""

    op: str
    admitted: bool
    samples: int
    relaunched: int
    reason: str


_INCONCLUSIVE = ("no sample", "never relaunched")


def merge_verdicts(op: str, parts: Iterable[Verdict]) -> Verdict:
    """One op's verdict from the verdicts of its parts (one per dtype, say): the first part
    that failed (raised, differed, did not finish), else admitted where the parts together
    ran a sample and relaunched a call."""
    parts = list(parts)
    for part in parts:
        if not part.admitted and not part.reason.startswith(_INCONCLUSIVE):
            return dataclasses.replace(part, op=op)
    samples = sum(p.samples for p in parts)
    relaunched = sum(p.relaunched for p in parts)
    if not samples:
        return Verdict(op, False, 0, 0, "no sample")
    if not relaunched:
        return Verdict(op, False, samples, 0, next(
            p.reason for p in parts if p.reason.startswith("never relaunched")))
    return Verdict(op, True, samples, relaunched, "")


def run_task(op: str, argv: list[str], timeout: float | None,
             env: dict[str, str] | None = None, deadline: float | None = None) -> Verdict:
    """Run ``argv`` (a process printing one op's verdict as a JSON line last; in ``env``
    where given) and read the verdict; a process that fails, takes longer than ``timeout``
    seconds or runs past ``deadline`` (a ``time.monotonic()`` value) is the op's failure,
    named."""
    limit, why = timeout, "--task-timeout"
    if deadline is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            return Verdict(op, False, 0, 0, "not checked: the run's --deadline had passed")
        if limit is None or left < limit:
            limit, why = left, "--deadline"
    try:
        done = subprocess.run(argv, check=False, capture_output=True, text=True,
                              timeout=limit, env=env)
    except subprocess.TimeoutExpired:
        return Verdict(op, False, 0, 0, f"not finished in {limit:.0f} s, its {why} (its kernels "
                       "compile and tune on first use: rerun with the kernel caches kept, or "
                       "with more time)")
    lines = done.stdout.strip().splitlines()
    try:
        return Verdict(**json.loads(lines[-1]))
    except (IndexError, ValueError, TypeError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Verdict(op, False, 0, 0, f"its check exited {done.returncode}: {tail}"[:200])


def run_tasks(tasks: list[tuple[str, list[str], dict[str, str] | None]], jobs: int,
              timeout: float | None, deadline: float | None = None,
              ) -> Iterator[tuple[str, list[Verdict]]]:
    """Run ``tasks`` ((op, argv, env)), ``jobs`` at a time, each within ``timeout`` seconds
    and all by ``deadline`` (a ``time.monotonic()`` value), and yield each op with its
    parts' verdicts (in the tasks' order) as soon as all of them are in: an op whose checks
    are slow holds back no other op's verdict."""
    parts: dict[str, list] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(run_task, op, argv, timeout, env, deadline): op
                   for op, argv, env in tasks}
        for future, op in futures.items():
            parts.setdefault(op, []).append(future)
        for future in as_completed(futures):
            op = futures[future]
            if op in parts and all(f.done() for f in parts[op]):
                yield op, [f.result() for f in parts.pop(op)]


def _tensors(value: object) -> list:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _on(device: str, sample: Sample) -> Sample:
    import torch
    from torch.utils._pytree import tree_map

    def move(t: object) -> object:
        return t.to(device) if isinstance(t, torch.Tensor) else t

    return tree_map(move, sample[0]), tree_map(move, sample[1])


def _difference(index: int, expected, first, second, tolerance: dict | None = None,
                labels: tuple[str, str] = ("recorded", "relaunched")) -> str:
    """How a later call's result differs from an earlier one's (``labels`` name the two
    calls), and which of the two matches the CPU (within ``tolerance``, the admission's):
    rounding (a few elements, last bits) reads otherwise than garbage."""
    import torch

    if first.shape != second.shape or first.stride() != second.stride():
        return (f"result {index} {tuple(first.shape)}/{first.stride()} {labels[0]}, "
                f"{tuple(second.shape)}/{second.stride()} {labels[1]}")
    a, b = first.cpu().nan_to_num(), second.cpu().nan_to_num()
    unequal = a != b
    gap = (a.double() - b.double()).abs().max().item() if a.is_floating_point() else "-"

    def matches(t) -> str:
        try:
            torch.testing.assert_close(t.cpu(), expected, equal_nan=True, **(tolerance or {}))
        except AssertionError:
            return "no"
        return "yes"

    return (f"result {index}: {int(unequal.sum())} of {a.numel()} elements differ, max "
            f"|difference| {gap}; matches the CPU: {labels[0]} {matches(first)}, {labels[1]} "
            f"{matches(second)}")


def check_op(op: str, samples: Iterable[Sample], provider: str,
             tolerance: Callable[[object], dict] | None = None,
             declared: Iterable[str] = ()) -> Verdict:
    """Run each sample (CPU tensors) of ``op`` (``"aten::add.Tensor"`` or a custom
    ``"ns::name"``) three times on flagos through ``provider`` with the op replayable,
    against the CPU. A call is the launch cache's relaunch where an earlier one was kept
    (an autotuned kernel's first call, which times its configs, is not: the second is
    recorded, the third relaunched); the three must be equal exactly. ``declared``: the
    provider's replayable ops
    before and after the check. A sample whose arguments the op does not take on the CPU
    is left out (OpInfo samples are the Python function's)."""
    import torch
    from flagos import launch_cache
    from flagos.provider_api import set_replayable

    ns, _, rest = op.partition("::")
    name, _, overload = rest.partition(".")
    overload_fn = getattr(getattr(getattr(torch.ops, ns), name), overload or "default")
    tolerance = tolerance or (lambda t: {})
    before, before_not_kept = launch_cache.stats(), launch_cache.not_kept()
    count = 0
    import flagos.routing

    declared = sorted(declared)
    set_replayable(provider, [*declared, op])
    try:
        with flagos.routing.override({op: [provider, "cpu"]}):
            for sample in samples:
                try:
                    expected = overload_fn(*sample[0], **sample[1])
                except (RuntimeError, TypeError, ValueError):
                    continue
                args, kwargs = _on("flagos", sample)
                calls, labels = [], []
                try:
                    for n in range(3):
                        relaunches = launch_cache.stats()["relaunched"]
                        calls.append(_tensors(overload_fn(*args, **kwargs)))
                        how = ("relaunched" if launch_cache.stats()["relaunched"] > relaunches
                               else "through Python")
                        labels.append(f"call {n + 1} ({how})")
                except Exception as err:  # noqa: BLE001 - the verdict names it
                    return Verdict(op, False, count, 0, f"raises on flagos: {err!r}"[:200])
                counts = {len(_tensors(expected)), *(len(c) for c in calls)}
                if len(counts) > 1:
                    return Verdict(op, False, count, 0, "returns another number of tensors on "
                                   f"flagos ({[len(c) for c in calls]}) than on the CPU "
                                   f"({len(_tensors(expected))})")
                for i, (e, *outs) in enumerate(zip(_tensors(expected), *calls, strict=True)):
                    for n in (1, 2):
                        a, b = outs[n - 1], outs[n]
                        if not (a.shape == b.shape and a.stride() == b.stride() and
                                torch.equal(a.cpu().nan_to_num(), b.cpu().nan_to_num())):
                            pair = (labels[n - 1], labels[n])
                            return Verdict(op, False, count, 0, f"{pair[1]} differs from "
                                           f"{pair[0]}: {_difference(i, e, a, b, tolerance(e), pair)}")
                    a = outs[0]
                    try:
                        torch.testing.assert_close(a.cpu(), e, equal_nan=True, **tolerance(e))
                    except AssertionError as err:
                        return Verdict(op, False, count, 0,
                                       f"differs from the CPU: {str(err).splitlines()[0]}")
                count += 1
    finally:
        set_replayable(provider, declared)
    relaunched = launch_cache.stats()["relaunched"] - before["relaunched"]
    if not count:
        return Verdict(op, False, 0, 0, "no sample")
    if not relaunched:
        why = ", ".join(f"{r} ({n})" for r, n in launch_cache.not_kept_since(before_not_kept).items())
        return Verdict(op, False, count, 0, "never relaunched: its calls were not kept: "
                       f"{why or 'none was recorded (its kernel is no replayable one here)'}")
    return Verdict(op, True, count, relaunched, "")


def opinfo_samples(op: str, max_samples: int, dtypes: Iterable[object]) -> Iterator[Sample]:
    """CPU samples of the OpInfo entries named like ``op``'s base name (or, for an overload
    whose schema is not its Python function's, of the entry ``_aten_samples`` names, in the
    overload's form), each also with its tensors of two or more dimensions made
    non-contiguous and, where it has 4-d tensors, channels-last (same values)."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.utils._pytree import tree_map

    from ._aten_samples import ATEN_FORMS

    form = ATEN_FORMS.get(op)
    if form is None:
        base = op.partition("::")[2].partition(".")[0].strip("_")
        infos = [i for i in op_db if i.name == base or (i.aten_name or "") == base]
    else:
        infos = [i for i in op_db if i.name == form.opinfo]

    def strided(t: object) -> object:
        if isinstance(t, torch.Tensor) and t.dim() >= 2:
            return t.mT.contiguous().mT
        return t

    def channels_last(t: object) -> object:
        if isinstance(t, torch.Tensor) and t.dim() == 4:
            return t.contiguous(memory_format=torch.channels_last)
        return t

    def has_4d(value: object) -> bool:
        return any(t.dim() == 4 for t in _tensors(value))

    for info in infos:
        for dtype in dtypes:
            if dtype not in info.supported_dtypes("cpu"):
                continue
            for i, s in enumerate(info.sample_inputs("cpu", dtype)):
                if i >= max_samples:
                    break
                sample = (((s.input, *s.args), dict(s.kwargs)) if form is None
                          else form.adapt(s.input, tuple(s.args), dict(s.kwargs)))
                if sample is None:
                    continue
                yield sample
                yield tree_map(strided, sample[0]), tree_map(strided, sample[1])
                if has_4d(sample):
                    yield tree_map(channels_last, sample[0]), tree_map(channels_last, sample[1])


def _tolerance(t: object) -> dict:
    import torch

    if t.dtype in (torch.float16, torch.bfloat16):
        return {"rtol": 1e-2, "atol": 1e-2}
    return {"rtol": 1e-4, "atol": 1e-5}


def main(argv: list[str] | None = None) -> int:
    import flagos
    import torch

    from flagos_ops_gems import gems_unavailable

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="", help="ATen overloads to check, comma-separated, or "
                    "'training-step' (TRAINING_STEP_OPS); default: every op gems serves that "
                    "writes none of its arguments")
    ap.add_argument("--max-samples", type=int, default=4)
    ap.add_argument("--dtypes", default="float32,bfloat16",
                    help="the samples' dtypes, comma-separated (default: float32,bfloat16)")
    ap.add_argument("--jobs", type=int, default=1, help="check each (op, dtype) in its own "
                    "process, this many at a time (default 1: all in this process)")
    ap.add_argument("--task-timeout", type=float, default=0, help="with --jobs: stop a "
                    "check running longer than this many seconds; its op is not admitted")
    ap.add_argument("--deadline", type=float, default=0, help="with --jobs: stop every check "
                    "this many seconds after the start; the ops whose checks did not finish "
                    "are not admitted, those admitted by then are written")
    ap.add_argument("--write", nargs="?", const=str(REPLAYABLE_FILE), default="",
                    metavar="PATH", help="write the admitted ops there (default: the "
                    f"installed package's {REPLAYABLE_FILE.name}; in a checkout, "
                    "packages/flagos-ops-gems/python/flagos_ops_gems/replayable.toml)")
    ap.add_argument("--verdict-json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if flagos.device_count() == 0 or flagos.get_device_properties(0).twin_device != "none":
        print("replay_admission: needs flagos devices without a twin (FLAGOS_NO_TWIN=1, or a "
              "chip whose memory nothing else addresses)")
        return 2
    why = gems_unavailable()
    if why:
        print(f"replay_admission: the gems provider cannot run here: {why}")
        return 2
    dtypes = [d for d in args.dtypes.split(",") if d]
    bad = [d for d in dtypes if not isinstance(getattr(torch, d, None), torch.dtype)]
    if bad:
        print(f"replay_admission: --dtypes names no torch dtype: {', '.join(bad)}")
        return 2
    gems = flagos.routing.providers()["gems"]
    functions = gems.library.functions
    named = TRAINING_STEP_OPS if args.ops == "training-step" else args.ops.split(",")
    ops = [o for o in named if o] or sorted(
        op for op in functions if gems.serves(op) and not _writes_an_argument(op))
    declared = gems.library.replayable_ops() & functions.keys()

    def check(op: str) -> Verdict:
        samples = opinfo_samples(op, args.max_samples, [getattr(torch, d) for d in dtypes])
        return check_op(op, samples, "gems", _tolerance, declared - {op})

    if args.verdict_json:  # one task of a --jobs run: its verdict, for the parent to read
        for op in ops:
            print(json.dumps(dataclasses.asdict(check(op))))
        return 0
    import flag_gems

    library = f"FlagGems {flag_gems.__version__}"
    scratch = tempfile.TemporaryDirectory(prefix="flagos-admission-")
    if args.jobs > 1:
        pairs = [(op, dtype) for op in ops for dtype in dtypes]
        tasks = [(op, [sys.executable, "-m", "flagos_ops_gems.replay_admission", "--ops", op,
                       "--dtypes", dtype, "--max-samples", str(args.max_samples),
                       "--verdict-json"], _tuning_apart(Path(scratch.name) / str(i)))
                 for i, (op, dtype) in enumerate(pairs)]
        deadline = time.monotonic() + args.deadline if args.deadline else None
        verdicts = ((op, merge_verdicts(op, parts)) for op, parts in
                    run_tasks(tasks, args.jobs, args.task_timeout or None, deadline))
    else:
        verdicts = ((op, check(op)) for op in ops)
    # a run over some ops leaves the others' entries as they were
    previous = read_admitted(Path(args.write)) if args.write else {}
    admitted: dict[str, str] = {}
    for op, verdict in verdicts:
        print(f"{op:48} {'admitted' if verdict.admitted else 'no':9} samples "
              f"{verdict.samples:3} relaunched {verdict.relaunched:4} {verdict.reason}",
              flush=True)
        if verdict.admitted:
            admitted[op] = source_digest(functions[op])
            if args.write:  # after each op: a check cut short keeps what it admitted
                write_admitted(merge_admitted(previous, ops, admitted), library,
                               Path(args.write))
    scratch.cleanup()
    print(f"{len(admitted)} of {len(ops)} ops admitted")
    if args.write:
        write_admitted(merge_admitted(previous, ops, admitted), library, Path(args.write))
        print(f"wrote {args.write}")
    return 0


def _tuning_apart(directory: Path) -> dict[str, str]:
    """The environment of a check run beside others: FlagGems' caches (its tuned configs, its
    generated code) copied into ``directory`` and used from there, so that configs timed
    while other checks share the GPU are not kept for later runs, and no two processes
    write one database."""
    import os

    source = Path(os.environ.get("FLAGGEMS_CACHE_DIR") or Path.home() / ".flaggems")
    if source.is_dir():
        shutil.copytree(source, directory)
    else:
        directory.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "FLAGGEMS_DB_URL"}
    env["FLAGGEMS_CACHE_DIR"] = str(directory)
    return env


def _writes_an_argument(op: str) -> bool:
    from ._schemas import op_schema

    schema = op_schema(op)
    return schema is None or any(a.alias_info is not None and a.alias_info.is_write
                                 for a in schema.arguments)


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark results as data: tables that a benchmark prints and writes as JSON.

Every benchmark of the project builds :class:`Table` objects, prints them with
:meth:`Table.format` and, given ``--json PATH``, writes them with :func:`write_json`
together with where they were measured (machine, torch, commit, the command). The
benchmarks page (docs/benchmarks.md) and its plots are generated from those files by
``tools/bench_report.py``; a table says how it is plotted (:class:`Plot`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["Plot", "Table", "environment", "machine_slug", "write_json"]


@dataclasses.dataclass
class Plot:
    """How a table is drawn: ``kind`` "bar" (one bar per row and ``y`` column, rows
    labelled by ``x``) or "line" (``y`` columns against the numeric ``x`` column)."""

    kind: str
    x: str
    y: list[str]
    ylabel: str = ""
    log_x: bool = False
    log_y: bool = False
    reference: float | None = None  # a horizontal line (parity: 1.0)


@dataclasses.dataclass
class Table:
    """One result table. ``rows`` hold numbers (floats, ints) or labels (strings); ratios
    are plain floats, never formatted strings, so that reports can compute with them."""

    benchmark: str
    title: str
    columns: list[str]
    rows: list[list[object]] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    plot: Plot | None = None

    def add(self, *row: object) -> None:
        if len(row) != len(self.columns):
            raise ValueError(f"{self.benchmark}: row {row!r} has {len(row)} values, the "
                             f"table has {len(self.columns)} columns {self.columns}")
        self.rows.append(list(row))

    def format(self) -> str:
        """The table as aligned text, for the terminal."""
        cells = [self.columns] + [[_cell(v) for v in r] for r in self.rows]
        widths = [max(len(c[i]) for c in cells) for i in range(len(self.columns))]
        lines = [f"## {self.title}"]
        for i, r in enumerate(cells):
            lines.append("  " + "  ".join(
                c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))
            if i == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
        lines += [f"  ({n})" for n in self.notes]
        return "\n".join(lines)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if self.plot is None:
            del d["plot"]
        return d


def _cell(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"
    return str(v)


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True,
                             cwd=Path(__file__).resolve().parent)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=False,
                               cwd=Path(__file__).resolve().parent).stdout.strip()
        return out.stdout.strip() + ("+" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("FLAGOS_BENCH_COMMIT", "unknown")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, object]:
    """Where results are measured: flagos:0's HAL and device, the native reference, the
    machine (GPU name, or CPU model and cores for sim), torch, the commit."""
    import torch

    import flagos
    from flagos.bench import native_reference

    props = flagos.get_device_properties(0)
    native = native_reference(0)  # the twin, or the device the HAL names (the GPU on cuda)
    if native is not None and native.type == "cuda":
        machine = torch.cuda.get_device_name(native)
    else:
        machine = f"{_cpu_model()}, {os.cpu_count()} cores"
    return {"hal": props.hal, "device": flagos.get_device_name(0),
            "native": str(native) if native is not None else None, "machine": machine,
            "torch": torch.__version__, "python": platform.python_version(),
            "commit": os.environ.get("FLAGOS_BENCH_COMMIT") or _git_commit()}


def machine_slug(env: dict[str, object]) -> str:
    """The results folder of a machine: ``sim`` for the sim HAL, else the HAL and the
    machine (``cuda-nvidia-h200``)."""
    if env["hal"] == "sim":
        return "sim"
    name = str(env["machine"]).lower().replace("nvidia ", "nvidia-")
    name = "".join(c if c.isalnum() or c == "-" else "-" for c in name).strip("-")
    return f"{env['hal']}-{'-'.join(filter(None, name.split('-')))}"


def write_json(path: str | os.PathLike, tables: Iterable[Table],
               command: Sequence[str] | None = None) -> dict:
    """Writes ``tables`` with :func:`environment` and the command that made them to
    ``path`` (folders made as needed); returns what was written."""
    cmd = command if command is not None else sys.argv
    data = {**environment(), "command": _user_command(cmd),
            "tables": [t.as_dict() for t in tables]}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


_ENV_IN_COMMAND = ("FLAGOS_HAL", "FLAGOS_NO_TWIN", "FLAGOS_ROUTES_FILE", "FLAGOS_ROUTES",
                   "FLAGOS_NATIVE_MANIFESTS")


def _user_command(cmd: Sequence[str]) -> str:
    """The command as a user runs it from the repository's root: ``python -m flagos.bench``
    rather than a path into site-packages, the flagos settings it ran with, and without
    the ``--json`` output argument."""
    out: list[str] = []
    skip = False
    for a in cmd:
        if skip:
            skip = False
        elif a == "--json":
            skip = True
        elif not a.startswith("--json="):
            out.append(a)
    script = Path(out[0]).resolve() if out else None
    if script is not None and script.name == "bench.py" and script.parent.name == "flagos":
        out[0:1] = ["-m", "flagos.bench"]
    elif script is not None and script.suffix == ".py" and script.is_relative_to(Path.cwd()):
        out[0] = str(script.relative_to(Path.cwd()))
    env = [f"{k}={os.environ[k]}" for k in _ENV_IN_COMMAND if os.environ.get(k)]
    return " ".join([*env, "python", shlex.join(out)])

"""The checks of the fixture checkpoints against the formats' own tools
(check_against_modelopt.py, check_against_llmcompressor.py): for each format, the fixture
written by make_checkpoints.py and the tool's export of the same seeded model must hold
the same tensors (names, dtypes, shapes, bytes) and the same quantization config."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import make_checkpoints as mc
import torch


def differing_tensors(mine_dir: Path, theirs_dir: Path) -> tuple[int, list[str]]:
    """How many tensors ``mine_dir``'s model.safetensors holds, and the names of those
    that differ from ``theirs_dir``'s in presence, dtype, shape or bytes."""
    from safetensors.torch import load_file

    def raw(t: torch.Tensor) -> torch.Tensor:
        return t.contiguous().reshape(-1).view(torch.uint8)

    mine = load_file(str(mine_dir / "model.safetensors"))
    theirs = load_file(str(theirs_dir / "model.safetensors"))
    bad = sorted(set(mine) ^ set(theirs))
    for k in sorted(set(mine) & set(theirs)):
        a, b = mine[k], theirs[k]
        if (a.dtype, a.shape) != (b.dtype, b.shape) or not torch.equal(raw(a), raw(b)):
            bad.append(k)
    return len(mine), bad


def compare(out: Path, formats: Iterable[str], export: Callable[[str, Path], Path],
            configs: Callable[[Path], object], aside: str) -> int:
    """Write each of ``formats`` to ``out/<format>``, let the tool write its own
    (``export(fmt, out)`` returns its directory) and compare tensors and ``configs(dir)``
    (the quantization configs, ``aside`` left out); prints a line per format and returns
    1 on any difference, else 0."""
    failures = 0
    for fmt in formats:
        mc.write(out, fmt)
        theirs = export(fmt, out)
        count, bad = differing_tensors(out / fmt, theirs)
        same_config = configs(out / fmt) == configs(theirs)
        print(f"{fmt}: {count} tensors, {len(bad)} differ"
              f"{': ' + ', '.join(bad[:8]) if bad else ''}; quantization configs "
              f"{'equal' if same_config else 'DIFFER'} ({aside} aside)")
        failures += len(bad) + (not same_config)
    return 1 if failures else 0


def run(doc: str, main: Callable[[Path], int]) -> None:
    """A check script's command line: ``SCRIPT OUT_DIR``; exits with ``main``'s status
    (2 and the script's ``doc`` for a wrong command line)."""
    if len(sys.argv) != 2:
        print(doc, file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(main(Path(sys.argv[1])))

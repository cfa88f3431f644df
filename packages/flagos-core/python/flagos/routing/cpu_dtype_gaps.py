"""Dtypes the CPU's kernels lack and accelerators' kernels have, and how often flagos
widened them (csrc/engines/cpu/cpu_dtype_gaps.h)."""

from __future__ import annotations


def cpu_dtype_gaps() -> list[dict]:
    """The ops whose CPU kernel lacks a dtype an accelerator's kernel has (torch.histc on
    integers, abs on bool). On CPU kernels (sim, opaque HALs, the cpu provider) flagos
    computes them in a dtype the kernel has, where that is exact, and casts the results
    back. One dict per op overload: ``op``, ``lacking`` (dtype names), ``computed_in``,
    ``calls`` (widened calls in this process)."""
    from flagos import _C

    return [{"op": op, "lacking": lacking.split(","), "computed_in": computed_in, "calls": calls}
            for op, lacking, computed_in, calls in _C._cpu_dtype_gaps()]

"""Strided indexing shared by the own kernels: a shape of up to four dimensions after
merging, and the Triton function that turns a flat element index into its coordinates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import triton
import triton.language as tl  # noqa: F401 - the namespace Triton's JIT resolves in jit code

__all__ = ["MAX_DIMS", "Layout", "merged_layout", "unravel4"]

MAX_DIMS = 4


class Layout(NamedTuple):
    """A shape of :data:`MAX_DIMS` dimensions, each operand's strides in it, and where the
    dimension asked to be kept stands (-1 where none was)."""

    sizes: list[int]
    strides: list[list[int]]
    kept: int


def merged_layout(shape: Sequence[int], strides: Sequence[Sequence[int]],
                  keep: int = -1) -> Layout | None:
    """``shape`` and each operand's ``strides`` (of ``shape``'s rank) with dimensions of
    size 1 dropped and neighbours merged where every operand steps over them as one, padded
    in front to :data:`MAX_DIMS`; dimension ``keep`` is neither dropped nor merged. None
    where more than :data:`MAX_DIMS` dimensions remain."""
    dims: list[tuple[int, list[int], bool]] = []
    for d, size in enumerate(shape):
        kept = d == keep
        if size == 1 and not kept:
            continue
        st = [s[d] for s in strides]
        if dims and not kept and not dims[-1][2] and all(
                prev == cur * size for prev, cur in zip(dims[-1][1], st)):
            dims[-1] = (dims[-1][0] * size, st, False)
        else:
            dims.append((size, st, kept))
    if len(dims) > MAX_DIMS:
        return None
    pad = MAX_DIMS - len(dims)
    sizes = [1] * pad + [size for size, _, _ in dims]
    per_operand = [[0] * pad + [st[i] for _, st, _ in dims] for i in range(len(strides))]
    kept_at = next((pad + i for i, (_, _, k) in enumerate(dims) if k), -1)
    return Layout(sizes, per_operand, kept_at)


@triton.jit
def unravel4(offs, s1, s2, s3):
    """The coordinates (i0, i1, i2, i3) of flat indices ``offs`` in a shape (s0, s1, s2,
    s3), the last dimension fastest."""
    i3 = offs % s3
    r = offs // s3
    i2 = r % s2
    r = r // s2
    i1 = r % s1
    i0 = r // s1
    return i0, i1, i2, i3

"""Scale layouts: one scale per block of a matrix, expanded to one per element, and the
128x4 blocked ("swizzled") layout NVIDIA's block-scaled matmuls take MX and NVFP4 scales in.

A scale matrix for a [rows, cols] operand with blocks of ``(br, bc)`` elements has
``ceil(rows / br) x ceil(cols / bc)`` entries; the last block of a row or column may be
partial (its scale covers the elements that exist).
"""

from __future__ import annotations

import math

import torch

__all__ = ["expand_block_scale", "from_blocked", "to_blocked"]


def expand_block_scale(scale: torch.Tensor, shape: tuple[int, int],
                       block: tuple[int, int]) -> torch.Tensor:
    """``scale`` ([ceil(rows/br), ceil(cols/bc)], or anything of that many elements in
    row-major order) repeated over its blocks and cropped to ``shape``; float32."""
    rows, cols = shape
    br, bc = block
    grid = (math.ceil(rows / br), math.ceil(cols / bc))
    if scale.numel() != grid[0] * grid[1]:
        raise ValueError(f"a scale for a {rows}x{cols} operand in {br}x{bc} blocks needs "
                         f"{grid[0]}x{grid[1]} = {grid[0] * grid[1]} entries, got shape "
                         f"{tuple(scale.shape)}")
    s = scale.reshape(grid).float()
    if grid == (1, 1):
        return s.expand(rows, cols)
    return s.repeat_interleave(br, 0)[:rows].repeat_interleave(bc, 1)[:, :cols]


def to_blocked(scale: torch.Tensor) -> torch.Tensor:
    """A [rows, cols] scale matrix in the 128x4 blocked layout (flat; rows padded to 128,
    cols to 4 with zeros): tiles of 128 rows x 4 columns, each stored as 32 rows of the
    4 interleaved 32-row groups (cuBLAS' block-scaling factor layout)."""
    rows, cols = scale.shape
    rb, cb = math.ceil(rows / 128), math.ceil(cols / 4)
    padded = scale
    if (rows, cols) != (rb * 128, cb * 4):
        padded = torch.zeros(rb * 128, cb * 4, dtype=scale.dtype, device=scale.device)
        padded[:rows, :cols] = scale
    tiles = padded.view(rb, 128, cb, 4).permute(0, 2, 1, 3)  # [rb, cb, 128, 4]
    return tiles.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1)


def from_blocked(blocked: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The [rows, cols] scale matrix stored in ``blocked`` (the inverse of
    :func:`to_blocked`)."""
    rb, cb = math.ceil(rows / 128), math.ceil(cols / 4)
    if blocked.numel() != rb * 128 * cb * 4:
        raise ValueError(f"a blocked (swizzled) scale for {rows}x{cols} blocks needs "
                         f"{rb * 128} x {cb * 4} = {rb * 128 * cb * 4} entries (rows padded "
                         f"to 128, columns to 4), got {blocked.numel()}")
    # flat index order of to_blocked: [rb, cb, j (32), i (4), c (4)] with row = i*32 + j
    t = blocked.reshape(rb, cb, 32, 4, 4).permute(0, 3, 2, 1, 4)  # [rb, i, j, cb, c]
    return t.reshape(rb * 128, cb * 4)[:rows, :cols]

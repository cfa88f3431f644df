"""``aten::upsample_nearest2d`` of an input of any strides, and
``aten::_upsample_nearest_exact2d``.

FlagGems 5.0 reads the input as contiguous NCHW, so a channels-last input (a UNet's
upsampler after a convolution) is read in the wrong order. This kernel reads the input
through its own strides and writes a result laid out as the input is (channels-last
stays channels-last), each output pixel taking the source index ATen's nearest mode
takes: ``min(floor(dst * scale), size - 1)`` in float32, ``scale`` being ``1 / scales``
where a scale is given and ``in / out`` otherwise (``floor((dst + 0.5) * scale)`` in the
nearest-exact mode, which FlagGems 5.0 has for 1-d inputs only).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from ._strided import unravel4

__all__ = ["upsample_nearest2d", "upsample_nearest_exact2d"]

_BLOCK = 1024


@triton.jit
def _source_index(dst, scale, size, EXACT: tl.constexpr):
    # ATen's nearest: floorf(dst * scale); nearest-exact: floorf((dst + 0.5) * scale), the
    # product taken in double and rounded to float as C++ does
    if EXACT:
        src = ((dst.to(tl.float64) + 0.5) * scale).to(tl.float32)
    else:
        src = dst.to(tl.float32) * scale
    return tl.minimum(tl.floor(src).to(tl.int64), size - 1)


@triton.jit
def _nearest_kernel(x_ptr, y_ptr, n, C, OH, OW, H, W, sx0, sx1, sx2, sx3, sy0, sy1, sy2, sy3,
                    scale_h, scale_w, EXACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i0, i1, oh, ow = unravel4(offs, C, OH, OW)
    ih = _source_index(oh, scale_h, H, EXACT)
    iw = _source_index(ow, scale_w, W, EXACT)
    v = tl.load(x_ptr + i0 * sx0 + i1 * sx1 + ih * sx2 + iw * sx3, mask=mask)
    tl.store(y_ptr + i0 * sy0 + i1 * sy1 + oh * sy2 + ow * sy3, v, mask=mask)


def _scale(in_size: int, out_size: int, scale: float | None) -> float:
    """ATen's ``compute_scales_value<float>``, rounded to float32 as ATen holds it."""
    value = 1.0 / scale if scale is not None and scale > 0 else in_size / out_size
    return struct.unpack("<f", struct.pack("<f", value))[0]


def upsample_nearest2d(input: torch.Tensor, output_size: Sequence[int],
                       scales_h: float | None = None, scales_w: float | None = None,
                       *, exact: bool = False) -> torch.Tensor:
    """The nearest-neighbour upsampling ATen computes (``exact``: its nearest-exact mode,
    pixel centres aligned), or NotImplemented for a call this kernel does not take (not
    4-d, an output size that is not two positive sizes)."""
    if input.dim() != 4 or len(output_size) != 2 or min(output_size) <= 0 or input.is_complex():
        return NotImplemented
    n, c, h, w = input.shape
    oh, ow = (int(s) for s in output_size)
    channels_last = input.is_contiguous(memory_format=torch.channels_last) \
        and not input.is_contiguous()
    out = torch.empty((n, c, oh, ow), dtype=input.dtype, device=input.device,
                      memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    total = out.numel()
    if input.numel() == 0:
        return NotImplemented  # ATen's own answer (an error where the output is not empty)
    if total == 0:
        return out
    _nearest_kernel[(triton.cdiv(total, _BLOCK),)](
        input, out, total, c, oh, ow, h, w, *input.stride(), *out.stride(),
        _scale(h, oh, scales_h), _scale(w, ow, scales_w), EXACT=exact, BLOCK=_BLOCK)
    return out


def upsample_nearest_exact2d(input: torch.Tensor, output_size: Sequence[int],
                             scales_h: float | None = None, scales_w: float | None = None
                             ) -> torch.Tensor:
    """``aten::_upsample_nearest_exact2d`` (``F.interpolate(mode="nearest-exact")``), which
    FlagGems 5.0 does not have."""
    return upsample_nearest2d(input, output_size, scales_h, scales_w, exact=True)

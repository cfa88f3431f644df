"""Kernels of flagos-ops-gems' own, for calls FlagGems computes wrong and ops it lacks.

FlagGems' guarded kernels (``_kernel_guards.py``) decline the calls they would get wrong.
With a twin device the chain's next provider runs them on the twin's own kernels; without
one (``FLAGOS_NO_TWIN=1``, a chip without CUDA) the next provider would be the CPU
fallback, a round trip through host memory. For those calls the gems provider runs a
kernel of its own instead, one op per module here, each tested against ATen
(``tests/test_own_kernels.py``) and written to be given back to FlagGems:

- ``aten::mul.Tensor`` (:mod:`.mul`): operands of any strides and broadcast shapes
  (FlagGems' Hopper ``mul`` reads both flat, as if dense and of the result's shape);
- ``aten::slice_backward`` (:mod:`.slice_backward`): a gradient of any strides (FlagGems'
  reads it as contiguous; a rotary embedding's half is a view);
- ``aten::nll_loss_backward`` (:mod:`.nll_loss_backward`): rows with an ignored target
  (FlagGems' kernel stores a zero at the ignored index's column, outside the row; it is
  never run), so a language model's loss gradient, the size of its logits, stays on the
  device;
- ``aten::native_group_norm`` and its backward (:mod:`.group_norm`): any number of
  channels per group (FlagGems' kernels read, and its backward writes, into the next group
  where ``C / groups`` is not a power of two, as in Stable Diffusion's UNet);
- ``aten::upsample_nearest2d`` (:mod:`.upsample_nearest2d`): an input of any strides
  (FlagGems' reads it as contiguous NCHW; a channels-last input is read wrong);
- ``aten::cat`` (:mod:`.cat`): several dtypes, or one tensor beside legacy empty ones (a
  key-value cache's first update), which FlagGems returns itself instead of a copy;
- ``aten::sum`` (:mod:`.sum`): integers and bools, summed in int64 as ATen does (FlagGems
  sums them in their own dtype);
- ``aten::cumsum`` and ``cumsum.out`` (:mod:`.cumsum`): integers and bools, and a
  ``dtype`` other than the input's, cast first and scanned as ATen does (FlagGems scans
  narrow integers in int32, and its guard declines other dtypes);
- ``aten::_grouped_mm`` (:mod:`.grouped_mm`): expert weights of any strides (FlagGems
  addresses them as contiguous; a mixture-of-experts layer passes a transposed view);
- ``aten::prod`` and ``prod.dim_int`` (:mod:`.prod`): integers and bools, multiplied in
  int64 (FlagGems multiplies in float32).

- ``aten::index.Tensor``, ``aten::index_put`` (and ``index_put_``, ``_index_put_impl_``)
  (:mod:`.index`, :mod:`.index_put`): negative indices, which FlagGems masks out instead
  of wrapping (its guard declines every call).

- ``aten::_upsample_nearest_exact2d`` (:mod:`.upsample_nearest2d`), ``aten::histc``
  (:mod:`.histc`) and ``aten::floor`` with ``floor.out`` (:mod:`.floor`), which FlagGems
  5.0 lacks (a Qwen-Image VAE upsamples so; a mixture-of-experts layer counts its
  experts' tokens with ``histc``; FlagGems has ``floor_`` only): served for every call
  they take.

The index, index_put, cat, sum, cumsum and grouped_mm kernels hand the calls FlagGems computes as ATen does to FlagGems' own kernel, with
the inputs cast, the lone tensor copied or the indices wrapped (on the device, through
other ops or a Triton kernel of this package).

Each kernel returns ``NotImplemented`` for a call it does not take (the chain's next
provider runs it): other dtypes, more than four dimensions after merging.
The Triton kernels run on any chip whose Triton backend compiles them.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["OPS", "OwnKernel", "kernel_for"]


class OwnKernel(NamedTuple):
    """Where an op's kernel is: ``function`` of module ``module`` here; with
    ``library_kernel``, it takes the library's own kernel of the op first (and hands it the
    calls it computes as ATen does)."""

    module: str
    function: str
    library_kernel: bool = False


_INDEX_PUT = OwnKernel("index_put", "index_put", library_kernel=True)
_SUM = OwnKernel("sum", "sum", library_kernel=True)
OPS: dict[str, OwnKernel] = {
    "aten::mul.Tensor": OwnKernel("mul", "mul"),
    "aten::nll_loss_backward": OwnKernel("nll_loss_backward", "nll_loss_backward"),
    "aten::slice_backward": OwnKernel("slice_backward", "slice_backward"),
    "aten::native_group_norm": OwnKernel("group_norm", "native_group_norm"),
    "aten::native_group_norm_backward": OwnKernel("group_norm", "native_group_norm_backward"),
    "aten::upsample_nearest2d": OwnKernel("upsample_nearest2d", "upsample_nearest2d"),
    "aten::_upsample_nearest_exact2d": OwnKernel("upsample_nearest2d", "upsample_nearest_exact2d"),
    "aten::index.Tensor": OwnKernel("index", "index", library_kernel=True),
    "aten::index_put": _INDEX_PUT,
    "aten::index_put_": _INDEX_PUT,
    "aten::_index_put_impl_": _INDEX_PUT,
    "aten::cat": OwnKernel("cat", "cat", library_kernel=True),
    "aten::sum": _SUM,
    "aten::sum.dim_IntList": _SUM,
    "aten::cumsum": OwnKernel("cumsum", "cumsum", library_kernel=True),
    "aten::cumsum.out": OwnKernel("cumsum", "cumsum_out", library_kernel=True),
    "aten::_grouped_mm": OwnKernel("grouped_mm", "grouped_mm", library_kernel=True),
    "aten::histc": OwnKernel("histc", "histc"),
    "aten::prod": OwnKernel("prod", "prod"),
    "aten::prod.dim_int": OwnKernel("prod", "prod_dim"),
    "aten::floor": OwnKernel("floor", "floor"),
    "aten::floor.out": OwnKernel("floor", "floor_out"),
}


def kernel_for(op: str, library_kernel: Callable[..., object] | None = None
               ) -> Callable[..., object] | None:
    """This package's kernel for ``op``, or None where it has none (or it needs the
    library's ``library_kernel`` of the op and none is given). Triton is imported here,
    when a kernel is asked for."""
    entry = OPS.get(op)
    if entry is None or (entry.library_kernel and library_kernel is None):
        return None
    kernel = getattr(importlib.import_module(f"{__name__}.{entry.module}"), entry.function)
    return functools.partial(kernel, library_kernel) if entry.library_kernel else kernel

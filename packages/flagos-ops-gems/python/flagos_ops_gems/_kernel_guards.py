"""FlagGems kernels with layout or shape assumptions that ATen's kernels do not make, run
only on the calls they compute as ATen does; every other call is declined, and the chain's
next provider runs it.

Generic kernels (``flag_gems/ops/``), on every chip. Found wrong in models through the
gems routes on the H200 (shadow verification):

- ``native_group_norm`` and its backward mask a group's rows by ``channel < C`` instead of
  by the group's own channel count, so where ``C / groups`` is not a power of two each
  group also reads (and its backward writes) the first channels of the next group: a
  Diffusers UNet with 96 channels in 32 groups gets wrong activations.
- ``upsample_nearest2d`` reads its input as a contiguous NCHW tensor: a channels-last input
  (a UNet's upsampler after a convolution) is read in the wrong order.
- ``slice_backward`` reads the incoming gradient as contiguous: a gradient that is a view
  (a rotary embedding's half, ``[..., :d/2]``) is read in the wrong order.

Found by reading FlagGems 5.0.2's source (the condition of each is beside it in
``_GENERIC_EXACT``): kernels that read or write a tensor flat or as contiguous without
making it so (upsampling, scatter, select/slice_scatter, index_select, index_add,
embedding_backward, dot, topk, triu_, vstack, the full reductions, softmax backward,
unfold_backward, max_pool2d_backward, zero_, bernoulli_); ``native_layer_norm_backward``,
which takes ``input.shape[0]`` rows whatever ``normalized_shape`` says; batch norm without
running statistics (it writes them into the input) and its backward in eval mode;
``nll_loss`` backward, which stores a zero at an ignored target's column (before the
gradient's memory for ``ignore_index=-100``); ``index``/``index_put``, which mask
negative indices out instead of wrapping them; ``argmin``'s unmasked innermost kernel;
``addmm``-style ops adding ``beta * bias`` for ``beta == 0``; integer sums and cumulative
sums in the input's dtype; float16 partial sums in ``var``; ``zero``, which zeroes its
input in place; ``cat`` of one tensor and ``sort`` of one element, which return their
input; ``_safe_softmax`` past 4096 columns; interpolation that ignores given scales.

Hopper kernels: on compute capability 9 FlagGems 5.0 registers, in place of its generic
kernels, the ones of ``flag_gems/runtime/backend/_nvidia/hopper/ops/``:

- ``mul`` (when both operands have the same rank), ``sqrt``, ``sqrt_`` and the in-place
  and ``out=`` forms of ``fill`` read and write ``numel()`` elements from each tensor's
  first element, ignoring shapes and strides, with 32-bit offsets, and allocate the result
  like the first operand. They are right for dense tensors of one layout and dtype and
  wrong otherwise: ``[2, 1] * [1, 16]`` returns a ``[2, 1]`` tensor, an operand expanded
  to the result's shape is read as if it were dense, ``x[:, 0].fill_(1)`` writes the
  first elements of ``x``; past 2**31 elements the offsets overflow. ``sqrt`` computes in
  float32 and keeps the input's dtype (integers are truncated, float64 loses precision).
- ``mm`` and ``mm.out`` build TMA descriptors for float16, bfloat16 and float32 when N and
  K suit them, which need 16-byte aligned bases and leading strides and non-empty shapes
  (offset slices, expanded operands and empty matrices raise); their N == 1 kernel writes
  the result as if its rows were contiguous; ``out=`` is never resized.

On plain CUDA tensors with ``flag_gems.enable()`` the same calls are just as wrong (on the
H200 a Diffusers ``UNet2DModel`` fails in its time embedding and a Llama's logits are off
by 0.37, from ``mul``). Through the gems routes on the H200, shadow verification found the
generic ones: ``native_group_norm`` and ``upsample_nearest2d`` in a ``UNet2DModel``,
whose output then differs in every element, and ``slice_backward`` in a Llama's gradients.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch

__all__ = ["computes_exactly", "guard_kernel", "is_dense"]

_GENERIC_OPS = os.path.join("flag_gems", "ops")
_HOPPER_OPS = os.path.join("runtime", "backend", "_nvidia", "hopper", "ops")
_MAX_FLAT = 2**31 - 2**16  # 32-bit offsets, with a block's worth of masked lanes to spare
# the floating dtypes FlagGems' Hopper kernels are written for -> elements per 16 bytes
_PER_16_BYTES = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4}


def is_dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill ``numel()`` consecutive elements of memory from its
    first one (non-overlapping and dense, in any dimension order)."""
    if t.is_contiguous():
        return True
    expected = 1
    for stride, size in sorted((s, n) for n, s in zip(t.shape, t.stride()) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _flat_ok(t: torch.Tensor) -> bool:
    return t.numel() <= _MAX_FLAT and is_dense(t)


def _mul_exact(a: object, b: object, *_: object, **__: object) -> bool:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return True  # a Python scalar: FlagGems' generic pointwise kernel
    if a.is_complex() or b.is_complex():  # its own complex path: the result takes a's shape
        return a.shape == b.shape and a.device == b.device
    if a.dim() != b.dim():
        return True  # FlagGems' generic pointwise kernel
    return (a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
            and a.device == b.device and _flat_ok(a))


def _sqrt_exact(a: torch.Tensor, *_: object, **__: object) -> bool:
    return a.dtype in _PER_16_BYTES and _flat_ok(a)


def _self_flat(a: torch.Tensor, *_: object, **__: object) -> bool:
    return _flat_ok(a)


def _out_flat(a: torch.Tensor, *_: object, out: torch.Tensor | None = None,
              **__: object) -> bool:
    return out is None or (out.shape == a.shape and _flat_ok(out))


def _tma_ok(t: torch.Tensor, element_size: int) -> bool:
    """What a TMA descriptor of ``t`` (or of ``t.T`` when column-major) needs."""
    s0, s1 = t.stride()
    if s0 > 1 and s1 > 1:
        return True  # FlagGems makes it contiguous first
    if s0 == 0 or s1 == 0 or t.data_ptr() % 16:
        return False
    return ((s0 if s1 == 1 else s1) * element_size) % 16 == 0


def _mm_exact(a: torch.Tensor, b: torch.Tensor, *_: object,
              out: torch.Tensor | None = None, **__: object) -> bool:
    dtype = a.dtype
    per_16_bytes = _PER_16_BYTES.get(dtype)
    if per_16_bytes is None or b.dtype != dtype:
        return False
    sa, sb = a.shape, b.shape
    if len(sa) != 2 or len(sb) != 2:
        return False
    (m, k), (kb, n) = sa, sb
    if k != kb or m == 0 or n == 0 or k == 0:
        return False
    if out is not None and (out.shape != (m, n) or out.dtype != dtype):
        return False  # ATen would resize or refuse; FlagGems writes it as it is
    if n == 1:  # its matrix-vector kernel writes row i at offset i
        return out is None or out.stride(0) == 1 or m == 1
    if n % per_16_bytes or k % per_16_bytes:
        return True  # no TMA: its general kernel takes any strides
    size = 16 // per_16_bytes
    return _tma_ok(a, size) and _tma_ok(b, size) and (
        out is None or (out.is_contiguous() and out.data_ptr() % 16 == 0))


def _groups_of_power_of_two(*args: object, **__: object) -> bool:
    # native_group_norm(input, weight, bias, N, C, HxW, group, eps) and
    # native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, mask)
    c, groups = (args[4], args[6]) if len(args) == 8 else (args[6], args[8])
    per_group = c // groups if groups else 0
    return per_group > 0 and per_group & (per_group - 1) == 0


def _input_contiguous(a: torch.Tensor, *_: object, **__: object) -> bool:
    return a.is_contiguous()


def _tensors_contiguous(*args: object, **kwargs: object) -> bool:
    # every tensor argument, and every tensor of a list argument, is contiguous
    for value in (*args, *kwargs.values()):
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor) and not t.is_contiguous():
                return False
    return True


def _second_contiguous(_: object, b: torch.Tensor, *__: object, **___: object) -> bool:
    return b.is_contiguous()


def _never(*_: object, **__: object) -> bool:
    return False


def _layer_norm_rows(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape,
                     *_: object, **__: object) -> bool:
    # its backward takes input.shape[0] rows of numel / shape[0] elements
    return input.dim() == len(normalized_shape) + 1 and input.shape[0] > 0


def _layer_norm_forward_rows(input: torch.Tensor, normalized_shape, *_: object,
                             **__: object) -> bool:
    # float32 statistics ATen's backward reads whatever their shape; others only where
    # FlagGems' backward serves the call too
    return input.numel() > 0 and (input.dtype == torch.float32
                                  or input.dim() == len(normalized_shape) + 1)


def _batch_norm_with_running_stats(input, weight=None, bias=None, running_mean=None,
                                   running_var=None, training=False, *_, **__) -> bool:
    # without running stats it writes the momentum update into the input itself; its
    # saved statistics are in the input's dtype, which ATen's backward (where FlagGems'
    # is declined) does not read for half inputs
    if not training:
        return True
    return running_mean is not None and running_var is not None \
        and input.dtype == torch.float32


def _batch_norm_backward_training(grad_out, input, weight=None, running_mean=None,
                                  running_var=None, save_mean=None, save_invstd=None,
                                  train=False, eps=1e-5, output_mask=(True,) * 3, **__) -> bool:
    # it always takes the training formula and save_mean / save_invstd, which an eval
    # forward leaves unwritten; without the input's gradient it fails
    return bool(train) and bool(output_mask[0])


def _softmax_row_fits(x: torch.Tensor, dim: int = -1, *_: object, **__: object) -> bool:
    # one block of at most 4096 columns per row (the rest are never written), computed in
    # float32
    return x.dim() >= 1 and 0 < x.shape[dim] <= 4096 and x.dtype in _PER_16_BYTES


def _floating(a: torch.Tensor, *_: object, dtype: torch.dtype | None = None,
              out: torch.Tensor | None = None, **__: object) -> bool:
    # sums accumulate in the input's dtype whatever dtype= asks (integers overflow, ATen
    # sums them in int64); out= is written as if contiguous
    return ((a.dtype.is_floating_point or a.dtype.is_complex)
            and (dtype is None or dtype == a.dtype
                 or (a.dtype in (torch.float16, torch.bfloat16) and dtype == torch.float32))
            and (out is None or out.is_contiguous()))


def _floating_dense(a: torch.Tensor, *args: object, **kwargs: object) -> bool:
    return _floating(a, *args, **kwargs) and _flat_ok(a)


def _prod_float32(a: torch.Tensor, *_: object, dtype: torch.dtype | None = None,
                  **__: object) -> bool:
    # computed in float32 whatever the dtype; the full product reads the input flat
    return a.dtype in _PER_16_BYTES and (dtype is None or dtype == a.dtype) and _flat_ok(a)


def _float32_dense(a: torch.Tensor, *_: object, **__: object) -> bool:
    # per-block partial sums kept in the input's dtype (float16 overflows), the full
    # reduction read flat
    return a.dtype == torch.float32 and _flat_ok(a)


def _dims_given(inp: torch.Tensor, dim: object = None, *_: object, **__: object) -> bool:
    # dim=[] taken as no reduction at all (ATen: every element)
    return not (isinstance(dim, (list, tuple)) and len(dim) == 0)


def _var_ok(a: torch.Tensor, dim: object = None, *_: object, **__: object) -> bool:
    return _dims_given(a, dim) and _float32_dense(a)


def _scatter_add_in_place(x: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor,
                          *_: object, **__: object) -> bool:
    # elsewhere it returns a new tensor and leaves x as it was, or reads it flat
    return (dim % max(x.dim(), 1) == x.dim() - 1 and x.dtype not in (torch.float16, torch.bfloat16)
            and x.is_contiguous() and index.is_contiguous() and src.is_contiguous())


def _scatter_dense(inp: torch.Tensor, *_: object, **__: object) -> bool:
    # the result is a clone of inp (dense) written with inp's strides, 32-bit offsets
    return _flat_ok(inp) and inp.is_contiguous()


def _sort_aliases(inp: torch.Tensor, *args: object, dim: int = -1, **__: object) -> bool:
    # a dimension of one element returns the input itself instead of a copy
    d = args[0] if args and isinstance(args[0], int) else dim
    return inp.dim() == 0 or inp.shape[d] > 1


def _scales_not_given(input, output_size=None, align_corners=False, scales_h=None,
                      scales_w=None, *_, **__) -> bool:
    # the scales ATen gives are ignored for the sizes' ratio
    return input.is_contiguous() and scales_h is None and scales_w is None


def _integer_upscale(*args: object, **kwargs: object) -> bool:
    # the nearest-exact index is computed as plain nearest's from the sizes (equal for
    # integer upscaling), ignoring given scales
    x = args[0] if args else kwargs.get("input", kwargs.get("self"))
    size = args[1] if len(args) > 1 else kwargs.get("output_size")
    scales = args[2] if len(args) > 2 else kwargs.get("scales")
    if not isinstance(x, torch.Tensor) or not size or scales is not None:
        return False
    return x.is_contiguous() and size[-1] % x.shape[-1] == 0


def _vdot_float32(a: torch.Tensor, b: torch.Tensor, *_: object, **__: object) -> bool:
    # other dtypes keep one partial sum per block in a buffer of at most 1024 blocks
    return a.dtype == torch.float32 and b.dtype == torch.float32


def _slice_scatter_ok(inp: torch.Tensor, src: torch.Tensor, dim: int = 0,
                      start: int | None = None, end: int | None = None, *_: object,
                      **__: object) -> bool:
    # written flat; negative or clamped bounds (end=INT64_MAX) fail its shape check
    return (inp.is_contiguous() and (start is None or start >= 0)
            and (end is None or 0 < end <= inp.shape[dim]))


def _unfold_backward_ok(grad_in: torch.Tensor, *_: object, **__: object) -> bool:
    # read flat, accumulated in float32
    return grad_in.is_contiguous() and grad_in.dtype != torch.float64


def _mask_within_input(inp: torch.Tensor, mask: torch.Tensor, *_: object, **__: object) -> bool:
    # the mask is broadcast to the input's shape, the input never to the mask's
    return torch.broadcast_shapes(inp.shape, mask.shape) == inp.shape


def _beta_nonzero(*_: object, beta: object = 1, **__: object) -> bool:
    # bias * beta is added even for beta == 0, where ATen ignores the bias (NaN in it too)
    return beta != 0


def _index_contiguous(inp: torch.Tensor, dim: int, index: torch.Tensor, *_: object,
                      **__: object) -> bool:
    return index.is_contiguous()


def _unit_strides(x: torch.Tensor, y: torch.Tensor, *_: object, **__: object) -> bool:
    return x.stride(0) == 1 and y.stride(0) == 1


def _cumsum_floating(inp: torch.Tensor, *_: object, dtype: torch.dtype | None = None,
                     out: torch.Tensor | None = None, **__: object) -> bool:
    # integers are scanned in their own width or int32 (ATen: int64); out= is written flat
    return (inp.dtype.is_floating_point and (dtype is None or dtype == inp.dtype)
            and (out is None or (out.is_contiguous() and out.shape == inp.shape)))


def _full_reduction_contiguous(inp: torch.Tensor, dim: object = None, *_: object,
                               **__: object) -> bool:
    # a reduction over every element reads the input flat (an argmax's index is then an
    # offset in memory)
    return (dim is not None and dim != [] and dim != ()) or inp.is_contiguous()


def _not_bool(inp: torch.Tensor, *_: object, **__: object) -> bool:
    # bool values come back as int64
    return inp.dtype != torch.bool


def _not_float64(grad: torch.Tensor, *_: object, **__: object) -> bool:
    # accumulated in float32
    return grad.dtype != torch.float64


def _nonnegative_index(grad, input_sizes, dim: int, index: int, *_: object,
                       **__: object) -> bool:
    # a negative index (autograd of x[:, -1]) raises
    return index >= 0


def _dim_not_none(inp: torch.Tensor, dim: object = None, *_: object, **__: object) -> bool:
    # dim=None (every element) raises
    return dim is not None


def _pool_with_stride(input: torch.Tensor, kernel_size, stride=(), *_: object,
                      **__: object) -> bool:
    # the functional default stride=[] (the kernel size) and unbatched input raise
    return input.dim() == 4 and len(stride) > 0


def _several_tensors(tensors, *_: object, **__: object) -> bool:
    # one tensor is returned itself (an alias); empty tensors are dropped before the dtypes
    # are promoted
    return (sum(1 for t in tensors if t.numel() or t.dim() != 1) > 1
            and len({t.dtype for t in tensors}) == 1)


def _pool_window_inside(input, kernel_size, stride=None, padding=0, ceil_mode=False,
                        count_include_pad=True, *_, **__) -> bool:
    # divides by the whole window where ATen clips a ceil-mode window to the padded input;
    # batched input only
    return input.dim() == 4 and not (ceil_mode and count_include_pad)


def _pool_backward_window_inside(grad_output, input, kernel_size, stride, padding,
                                 ceil_mode, count_include_pad, *_, **__) -> bool:
    return not (ceil_mode and count_include_pad)


def _grouped_b_dense(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None,
                     bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
                     *_: object, **__: object) -> bool:
    # group g of B is addressed at row g * K, whatever B's strides; only the 2-D x 3-D form
    # with offsets, without bias or another output dtype
    return (a.dim() == 2 and b.dim() == 3 and offs is not None and bias is None
            and out_dtype in (None, a.dtype) and b.is_contiguous())


# (file in the generic ops folder, function) -> whether the kernel computes a call exactly
_GENERIC_EXACT: dict[tuple[str, str], Callable[..., bool]] = {
    ("groupnorm.py", "group_norm"): _groups_of_power_of_two,
    ("groupnorm.py", "group_norm_backward"): _groups_of_power_of_two,
    # FlagGems' forward saves its statistics in the input's dtype, which ATen's backward
    # (where FlagGems' is declined) does not read for half inputs
    ("layernorm.py", "layer_norm"): _layer_norm_forward_rows,
    ("layernorm.py", "layer_norm_backward"): _layer_norm_rows,
    ("batch_norm.py", "batch_norm"): _batch_norm_with_running_stats,
    ("batch_norm.py", "batch_norm_backward"): _batch_norm_backward_training,
    # ignored targets (ignore_index, -100 by default) store a zero at row * C + ignore_index:
    # before the gradient's memory or into another row's
    ("nllloss.py", "nll_loss_backward"): _never,
    ("nllloss.py", "nll_loss2d_backward"): _never,
    ("softmax.py", "softmax_backward"): _second_contiguous,
    ("log_softmax.py", "log_softmax_backward"): _second_contiguous,
    ("_safe_softmax.py", "_safe_softmax"): _softmax_row_fits,
    ("sum.py", "sum"): _floating,
    ("sum.py", "sum_dim"): _floating,
    ("sum.py", "sum_dim_out"): _floating,
    ("sum.py", "sum_out"): _floating_dense,
    ("prod.py", "prod"): _prod_float32,
    ("prod.py", "prod_dim"): _prod_float32,
    ("var.py", "var"): _var_ok,
    ("var.py", "var_correction"): _var_ok,
    ("var.py", "var_dim"): _var_ok,
    ("var_mean.py", "var_mean"): _var_ok,
    ("scatter_add_.py", "scatter_add_"): _scatter_add_in_place,
    ("scatter.py", "scatter"): _scatter_dense,
    ("masked_scatter.py", "masked_scatter"): _mask_within_input,
    ("select_scatter.py", "select_scatter"): _input_contiguous,
    ("slice_scatter.py", "slice_scatter"): _slice_scatter_ok,
    ("topk.py", "topk"): _tensors_contiguous,
    ("sort.py", "sort"): _sort_aliases,
    ("sort.py", "sort_stable"): _sort_aliases,
    ("triu.py", "triu_"): _input_contiguous,
    ("vstack.py", "vstack"): _tensors_contiguous,
    ("vdot.py", "vdot"): _vdot_float32,
    ("zeros.py", "zero_"): _self_flat,
    ("zero.py", "zero"): _never,  # zeroes its input in place and returns it
    ("unfold_backward.py", "unfold_backward"): _unfold_backward_ok,
    # takes an indices argument that aten::max_pool2d_backward does not have
    ("max_pool2d_with_indices.py", "max_pool2d_backward"): _never,
    ("upsample_nearest1d.py", "upsample_nearest1d"): _input_contiguous,
    ("upsample_nearest2d.py", "upsample_nearest2d"): _input_contiguous,
    ("upsample_nearest3d.py", "upsample_nearest3d"): _input_contiguous,
    ("upsample_bicubic2d_aa.py", "_upsample_bicubic2d_aa"): _input_contiguous,
    ("upsample_bicubic2d.py", "upsample_bicubic2d"): _scales_not_given,
    ("_upsample_nearest_exact1d.py", "_upsample_nearest_exact1d"): _integer_upscale,
    ("slice_backward.py", "slice_backward"): _input_contiguous,
    # negative indices are masked out instead of wrapped: index reads unwritten memory,
    # index_put skips the write
    ("index.py", "index"): _never,
    ("index_put.py", "index_put"): _never,
    ("index_put.py", "index_put_"): _never,
    ("index_put.py", "_index_put_impl_"): _never,
    ("index_select.py", "index_select"): _index_contiguous,
    ("index_add.py", "index_add"): _tensors_contiguous,
    ("index_add.py", "index_add_"): _tensors_contiguous,
    ("embedding.py", "embedding_backward"): _tensors_contiguous,
    ("dot.py", "dot"): _unit_strides,
    ("addmm.py", "addmm"): _beta_nonzero,
    ("addmm.py", "addmm_out"): _beta_nonzero,
    ("addmv.py", "addmv"): _beta_nonzero,
    ("addmv.py", "addmv_out"): _beta_nonzero,
    ("addr.py", "addr"): _beta_nonzero,
    ("baddbmm.py", "baddbmm"): _beta_nonzero,
    # its innermost-dimension kernel loads and stores unmasked: past the row and the output
    ("argmin.py", "argmin"): _never,
    ("argmax.py", "argmax"): _full_reduction_contiguous,
    ("amax.py", "amax"): _full_reduction_contiguous,
    ("aminmax.py", "aminmax"): _full_reduction_contiguous,
    ("all.py", "all"): _input_contiguous,
    ("any.py", "any"): _input_contiguous,
    ("_is_all_true.py", "_is_all_true"): _input_contiguous,
    ("all.py", "all_dims"): _dims_given,
    ("any.py", "any_dims"): _dims_given,
    # calls ATen computes and these wrappers raise on: declined instead
    ("select_backward.py", "select_backward"): _nonnegative_index,
    ("mean.py", "mean_dim"): _dim_not_none,
    ("max_pool2d_with_indices.py", "max_pool2d_with_indices"): _pool_with_stride,
    ("cummax.py", "cummax"): _not_bool,
    ("cummin.py", "cummin"): _not_bool,
    ("embedding_dense_backward.py", "embedding_dense_backward"): _not_float64,
    ("cumsum.py", "cumsum"): _cumsum_floating,
    ("cumsum.py", "cumsum_out"): _cumsum_floating,
    ("bernoulli_.py", "bernoulli_"): _input_contiguous,
    ("cat.py", "cat"): _several_tensors,
    ("avg_pool2d.py", "avg_pool2d"): _pool_window_inside,
    ("avg_pool2d.py", "avg_pool2d_backward"): _pool_backward_window_inside,
    ("group_gemm.py", "group_mm"): _grouped_b_dense,
    ("vector_norm.py", "vector_norm"): _float32_dense,
}

# (file in the hopper ops folder, function) -> whether the kernel computes a call exactly
_HOPPER_EXACT: dict[tuple[str, str], Callable[..., bool]] = {
    ("mul.py", "mul"): _mul_exact,
    ("sqrt.py", "sqrt"): _sqrt_exact,
    ("sqrt.py", "sqrt_"): _sqrt_exact,
    ("fill.py", "fill_scalar_"): _self_flat,
    ("fill.py", "fill_tensor_"): _self_flat,
    ("fill.py", "fill_scalar_out"): _out_flat,
    ("fill.py", "fill_tensor_out"): _out_flat,
    ("mm.py", "mm"): _mm_exact,
    ("mm.py", "mm_out"): _mm_exact,
}


def _exactness_check(fn: Callable[..., object]) -> Callable[..., bool] | None:
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    folder, file = os.path.split(code.co_filename)
    for suffix, table in ((_HOPPER_OPS, _HOPPER_EXACT), (_GENERIC_OPS, _GENERIC_EXACT)):
        if folder.endswith(suffix):
            return table.get((file, fn.__name__))
    return None


def _holds(exact: Callable[..., bool], args: tuple, kwargs: dict) -> bool:
    try:
        return bool(exact(*args, **kwargs))
    except Exception:  # noqa: BLE001 - arguments the condition did not foresee: not exact
        return False


def computes_exactly(fn: Callable[..., object], *args: object, **kwargs: object) -> bool:
    """Whether FlagGems' kernel ``fn`` computes the call with these arguments as ATen does
    (True for a kernel without a condition above)."""
    exact = _exactness_check(fn)
    return exact is None or _holds(exact, args, kwargs)


def guard_kernel(fn: Callable[..., object], own: Callable[..., object] | None = None
                 ) -> Callable[..., object]:
    """``fn``, or, for one of the kernels above, ``fn`` running only the calls it computes
    as ATen does: the others go to ``own`` (a kernel of this package's, which may decline
    a call too) where one is given, else are declined (NotImplemented)."""
    exact = _exactness_check(fn)
    if exact is None:
        return fn

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        if not _holds(exact, args, kwargs):
            return NotImplemented if own is None else own(*args, **kwargs)
        return fn(*args, **kwargs)

    return guarded

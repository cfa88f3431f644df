"""flagos-ops-gems' own Triton kernels (flagos_ops_gems/own_kernels) against ATen, on CPU
tensors under Triton's interpreter here (conftest) and compiled on a GPU; and the guard
that gives them the calls FlagGems' kernels would get wrong."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest
import torch

pytest.importorskip("triton")

from flagos_ops_gems import own_kernels
from flagos_ops_gems._kernel_guards import guard_kernel

DEVICE = "cpu" if torch.flagos.get_device_properties(0).hal == "sim" else "cuda"


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    # Triton's interpreter rounds float32 to bfloat16 by truncation, ATen to nearest: one
    # unit in the last place apart
    tol = {"rtol": 2**-7, "atol": 0} if want.dtype == torch.bfloat16 else {}
    torch.testing.assert_close(got, want, **tol)


def _randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE).to(dtype)


MUL_CASES = {
    "broadcast rows": lambda: (_randn(2, 1), _randn(1, 16)),
    "rotary": lambda: (_randn(2, 8, 4, 16, dtype=torch.bfloat16),
                       _randn(1, 8, 1, 16, dtype=torch.bfloat16)),
    "expanded": lambda: (torch.full((), 3.0, device=DEVICE).expand(4, 8), _randn(4, 8)),
    "transposed and contiguous": lambda: (_randn(8, 4).t(), _randn(4, 8)),
    "strided": lambda: (_randn(6, 10)[:, ::2], _randn(6, 10)[:, 1::2]),
    "channels last": lambda: (_randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
                              _randn(1, 3, 1, 1)),
    "bf16 by float32": lambda: (_randn(4, 8, dtype=torch.bfloat16), _randn(4, 8)),
    "0-dim float32 by bf16": lambda: (_randn(4, 8, dtype=torch.bfloat16),
                                      torch.tensor(1.5, device=DEVICE)),
    "float64": lambda: (_randn(3, 5, dtype=torch.float64), _randn(5, dtype=torch.float64)),
    "float16 five dims merged": lambda: (_randn(2, 3, 4, 5, 6, dtype=torch.float16),
                                         _randn(2, 3, 4, 5, 6, dtype=torch.float16)),
    "empty": lambda: (_randn(0, 4), _randn(1, 4)),
}


@pytest.mark.parametrize("case", MUL_CASES)
def test_mul_matches_aten(case: str) -> None:
    a, b = MUL_CASES[case]()
    got = own_kernels.kernel_for("aten::mul.Tensor")(a, b)
    want = torch.mul(a, b)
    _close(got, want)
    if want.is_contiguous() or case == "channels last":
        assert got.stride() == want.stride()


def test_mul_declines_what_it_does_not_take() -> None:
    mul = own_kernels.kernel_for("aten::mul.Tensor")
    a = _randn(2, 3)
    for x, y in [(a, 2.0), (a.int(), a.int()), (a, torch.randn(2, 3).to(torch.complex64)),
                 (_randn(2, 2, 2, 2, 2), _randn(2, 2, 2, 2, 2).permute(4, 3, 2, 1, 0))]:
        assert mul(x, y) is NotImplemented


def _slice_grad(sizes: list[int], dim: int, start: int, end: int, step: int,
                view: bool, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    x = torch.empty(sizes)
    shape = list(x.narrow(dim, 0, sizes[dim])[(slice(None),) * dim + (slice(start, end, step),)]
                 .shape)
    if not view:
        return _randn(*shape, dtype=dtype)
    # a view: the first half of a wider tensor's last dimension, then transposed twice
    wide = _randn(*shape[:-1], shape[-1] * 2, dtype=dtype)
    return wide[..., :shape[-1]]


SLICE_CASES = {
    "rotary half": ([2, 8, 4, 16], 3, 0, 8, 1, True),
    "second half": ([2, 8, 4, 16], 3, 8, 16, 1, True),
    "rows with a step": ([10, 6], 0, 1, 9, 3, False),
    "middle dim": ([3, 7, 5], 1, 2, 6, 1, True),
    "negative bounds": ([4, 9], 1, -6, -1, 2, False),
    "end past the size": ([4, 9], 1, 3, 2**62, 1, True),
    "bf16": ([2, 3, 8], 2, 4, 8, 1, True),
    "empty slice": ([4, 5], 1, 3, 3, 1, False),
}


@pytest.mark.parametrize("case", SLICE_CASES)
def test_slice_backward_matches_aten(case: str) -> None:
    sizes, dim, start, end, step, view = SLICE_CASES[case]
    dtype = torch.bfloat16 if case == "bf16" else torch.float32
    grad = _slice_grad(sizes, dim, start, end, step, view, dtype)
    before = grad.clone()
    got = own_kernels.kernel_for("aten::slice_backward")(grad, sizes, dim, start, end, step)
    want = torch.ops.aten.slice_backward(grad, sizes, dim, start, end, step)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert got.is_contiguous()
    assert torch.equal(grad, before)  # the gradient is not written


def test_slice_backward_declines_a_gradient_of_another_shape() -> None:
    kernel = own_kernels.kernel_for("aten::slice_backward")
    assert kernel(_randn(4, 3), [4, 9], 1, 0, 4, 1) is NotImplemented
    assert kernel(_randn(4, 3).to(torch.complex64), [4, 9], 1, 0, 3, 1) is NotImplemented


def _nll_case(n: int, c: int, reduction: int, weighted: bool, ignored: bool,
              dtype: torch.dtype = torch.float32) -> tuple:
    logits = _randn(n, c, dtype=dtype) if n else _randn(c, dtype=dtype)
    target = torch.randint(0, c, (n,) if n else (), device=DEVICE)
    if ignored and n:
        target[::3] = -100
    weight = torch.rand(c, device=DEVICE).to(dtype) + 0.5 if weighted else None
    x = logits.log_softmax(-1)
    _, total = torch.ops.aten.nll_loss_forward(x, target, weight, reduction, -100)
    grad = _randn(n, dtype=dtype) if reduction == 0 and n else torch.tensor(
        1.7, device=DEVICE).to(dtype)
    return grad, x, target, weight, reduction, -100, total


NLL_CASES = {
    "mean": (6, 1000, 1, False, False),
    "mean, weighted, ignored rows": (7, 2500, 1, True, True),
    "sum, ignored rows": (5, 33, 2, False, True),
    "none, weighted": (4, 17, 0, True, False),
    "one sample (1-d input)": (0, 40, 1, True, False),
    "bf16 mean, ignored rows": (9, 300, 1, False, True),
    "every row ignored": (3, 10, 1, False, "all"),
}


@pytest.mark.parametrize("case", NLL_CASES)
def test_nll_loss_backward_matches_aten(case: str) -> None:
    n, c, reduction, weighted, ignored = NLL_CASES[case]
    dtype = torch.bfloat16 if case.startswith("bf16") else torch.float32
    args = _nll_case(n, c, reduction, weighted, bool(ignored), dtype)
    if ignored == "all":
        args[2].fill_(-100)
    got = own_kernels.kernel_for("aten::nll_loss_backward")(*args)
    want = torch.ops.aten.nll_loss_backward(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=2**-7 if dtype == torch.bfloat16 else 1e-6,
                               atol=1e-6)


def test_nll_loss_backward_names_a_target_out_of_range() -> None:
    args = list(_nll_case(4, 10, 1, False, False))
    args[2][2] = 10
    with pytest.raises(IndexError, match="Target 10 is out of bounds"):
        own_kernels.kernel_for("aten::nll_loss_backward")(*args)
    args[2][2] = -3
    with pytest.raises(IndexError, match="Target -3 is out of bounds"):
        own_kernels.kernel_for("aten::nll_loss_backward")(*args)


def test_nll_loss_backward_declines_what_it_does_not_take() -> None:
    kernel = own_kernels.kernel_for("aten::nll_loss_backward")
    grad, x, target, weight, reduction, ignore, total = _nll_case(4, 10, 1, False, False)
    assert kernel(grad, x.view(2, 2, 10), target, weight, reduction, ignore, total) \
        is NotImplemented  # 3-d: nll_loss2d's
    assert kernel(grad, x, target[:3], weight, reduction, ignore, total) is NotImplemented
    assert kernel(grad, x.int(), target, weight, reduction, ignore, total) is NotImplemented


GROUP_NORM_CASES = {
    "96 channels in 32 groups": (2, 96, 8, 8, 32, True, True, torch.float32),
    "320 channels in 32 groups": (1, 320, 4, 4, 32, True, True, torch.float32),
    "no affine": (3, 12, 5, 7, 4, False, False, torch.float32),
    "weight only, bf16": (2, 24, 6, 6, 8, True, False, torch.bfloat16),
    "one group, large": (1, 6, 40, 40, 1, True, True, torch.float32),
    "float64": (2, 9, 3, 3, 3, True, True, torch.float64),
}


@pytest.mark.parametrize("case", GROUP_NORM_CASES)
def test_group_norm_matches_aten(case: str) -> None:
    n, c, h, w, groups, weighted, biased, dtype = GROUP_NORM_CASES[case]
    x = (_randn(n, c, h, w) * 3 + 1).to(dtype)
    weight = _randn(c, dtype=dtype) if weighted else None
    bias = _randn(c, dtype=dtype) if biased else None
    args = (x, weight, bias, n, c, h * w, groups, 1e-5)
    got = own_kernels.kernel_for("aten::native_group_norm")(*args)
    want = torch.ops.aten.native_group_norm(*args)
    for g, e in zip(got, want):
        assert g.dtype == e.dtype and g.shape == e.shape
        if dtype == torch.bfloat16:
            torch.testing.assert_close(g.float(), e.float(), rtol=2**-6, atol=2**-6)
        else:
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


GROUP_NORM_BACKWARD_CASES = {
    "3 channels per group": (2, 6, 5, 2, torch.float32, True),
    "no weight": (3, 6, 7, 3, torch.float32, False),
    "float64, one group": (2, 5, 4, 1, torch.float64, True),
    "bf16": (2, 12, 9, 4, torch.bfloat16, True),
}


@pytest.mark.parametrize("case", GROUP_NORM_BACKWARD_CASES)
def test_group_norm_backward_matches_aten(case: str) -> None:
    n, c, hw, groups, dtype, with_weight = GROUP_NORM_BACKWARD_CASES[case]
    x = _randn(n, c, hw, dtype=dtype)
    dy = _randn(n, c, hw, dtype=dtype)
    # ATen's CPU kernels take float32 parameters beside bf16 input; its CUDA kernels do not
    param_dtype = torch.float32 if dtype == torch.bfloat16 and DEVICE == "cpu" else dtype
    w = _randn(c, dtype=param_dtype) if with_weight else None
    b = _randn(c, dtype=param_dtype) if with_weight else None
    aten = torch.ops.aten
    _, mean, rstd = aten.native_group_norm(x, w, b, n, c, hw, groups, 1e-5)
    backward = own_kernels.kernel_for("aten::native_group_norm_backward")
    masks = ([True, True, True], [True, False, False], [False, True, True]) if with_weight \
        else ([True, False, False],)  # without a weight autograd asks for grad_input alone
    for mask in masks:
        got = backward(dy, x, mean, rstd, w, n, c, hw, groups, mask)
        want = aten.native_group_norm_backward(dy, x, mean, rstd, w, n, c, hw, groups, mask)
        for g, e, asked in zip(got, want, mask, strict=True):
            if not asked:
                assert g is None
                continue
            assert g.dtype == e.dtype and g.shape == e.shape
            tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
            torch.testing.assert_close(g, e, **tol)


def test_group_norm_statistics_are_float32_for_parameters_of_another_dtype() -> None:
    x, w = _randn(2, 6, 4, 4, dtype=torch.bfloat16), _randn(6)
    out, mean, rstd = own_kernels.kernel_for("aten::native_group_norm")(
        x, w, None, 2, 6, 16, 3, 1e-5)
    assert out.dtype == torch.bfloat16 and mean.dtype == rstd.dtype == torch.float32
    kernel = own_kernels.kernel_for("aten::native_group_norm")
    nhwc = x.to(memory_format=torch.channels_last)
    assert kernel(nhwc, w, None, 2, 6, 16, 3, 1e-5) is NotImplemented


UPSAMPLE_CASES = {
    "2x": ((2, 3, 4, 5), (8, 10), None, None, False),
    "channels last 2x": ((2, 3, 4, 5), (8, 10), 2.0, 2.0, True),
    "3x and 1.5x": ((1, 2, 4, 6), (12, 9), None, None, False),
    "down": ((1, 2, 9, 7), (4, 3), None, None, False),
    "scales given": ((1, 1, 5, 5), (11, 13), 2.2, 2.6, False),
    "sliced input": ((2, 4, 6, 6), (12, 12), None, None, "slice"),
}


@pytest.mark.parametrize("op", ["aten::upsample_nearest2d", "aten::_upsample_nearest_exact2d"])
@pytest.mark.parametrize("case", UPSAMPLE_CASES)
def test_upsample_nearest2d_matches_aten(case: str, op: str) -> None:
    shape, size, sh, sw, layout = UPSAMPLE_CASES[case]
    x = _randn(*shape)
    if layout is True:
        x = x.to(memory_format=torch.channels_last)
    elif layout == "slice":
        x = _randn(shape[0], shape[1] * 2, *shape[2:])[:, ::2]
    got = own_kernels.kernel_for(op)(x, size, sh, sw)
    want = getattr(torch.ops.aten, op.split("::")[1])(x, size, sh, sw)
    assert torch.equal(got, want)
    assert got.stride() == want.stride()


class _Library:
    """A stand-in for FlagGems' own kernel of an op: ATen's, recording its calls."""

    def __init__(self, fn) -> None:
        self.fn, self.calls = fn, []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.fn(*args, **kwargs)


def test_cat_promotes_dtypes_and_copies_a_lone_tensor() -> None:
    library = _Library(torch.cat)
    cat = own_kernels.kernel_for("aten::cat", library)
    x = _randn(2, 3)
    empty = torch.tensor([], device=DEVICE)
    for tensors, dim in [([empty, x], -2), ([x, empty], 0)]:
        got = cat(tensors, dim)
        assert torch.equal(got, torch.cat(tensors, dim)) and got.data_ptr() != x.data_ptr()
    assert library.calls == []  # a lone tensor: copied, FlagGems' cat not called
    half = _randn(2, 3, dtype=torch.float16)
    mixed = [half, x, torch.tensor([], dtype=torch.float64, device=DEVICE)]
    want = torch.cat(mixed)
    got = cat(mixed)
    assert got.dtype == want.dtype == torch.float64 and torch.equal(got, want)
    (given, _), = library.calls
    assert {t.dtype for t in given[0]} == {torch.float64} and len(given[0]) == 2
    nhwc = _randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert cat([empty, nhwc], 1).is_contiguous(memory_format=torch.channels_last)
    assert cat([empty, empty]).shape == (0,)
    assert cat([]) is NotImplemented
    assert cat([empty, x], 5) is NotImplemented  # ATen's error, from the next provider


def test_integer_sums_accumulate_as_aten_does() -> None:
    mask = torch.ones(300, dtype=torch.bool, device=DEVICE)
    small = torch.full((4, 100), 100, dtype=torch.int8, device=DEVICE)
    for op, args, kwargs in [("aten::sum", (mask,), {}),
                             ("aten::sum", (small,), {}),
                             ("aten::sum", (small,), {"dtype": torch.int32}),
                             ("aten::sum.dim_IntList", (small, [1]), {}),
                             ("aten::sum.dim_IntList", (mask.view(3, 100), [0], True), {})]:
        library = _Library(torch.sum)
        got = own_kernels.kernel_for(op, library)(*args, **kwargs)
        want = torch.sum(*args, **kwargs)
        assert got.dtype == want.dtype and torch.equal(got, want), (op, args, kwargs)
        (given, _), = library.calls
        assert given[0].dtype == kwargs.get("dtype", torch.int64)
    kernel = own_kernels.kernel_for("aten::sum", _Library(torch.sum))
    assert kernel(_randn(3)) is NotImplemented  # floating: FlagGems' own sum
    assert kernel(small, dtype=torch.float32) is NotImplemented


CUMSUM_CASES = {
    "int32 counts to int32 offsets": (lambda: torch.tensor([3, 0, 5, 4], dtype=torch.int32,
                                                           device=DEVICE), 0, torch.int32),
    "bool mask": (lambda: torch.ones(2, 300, dtype=torch.bool, device=DEVICE), 1, None),
    "int8 past its range": (lambda: torch.full((3, 100), 100, dtype=torch.int8,
                                               device=DEVICE), -1, None),
    "bf16 to float32": (lambda: _randn(4, 6, dtype=torch.bfloat16), 0, torch.float32),
    "float32 to int64": (lambda: _randn(5) * 10, 0, torch.int64),
    "0-dim": (lambda: torch.tensor(7, device=DEVICE), 0, None),
}


@pytest.mark.parametrize("case", CUMSUM_CASES)
def test_cumsum_scans_in_atens_dtype(case: str) -> None:
    make, dim, dtype = CUMSUM_CASES[case]
    x = make()
    library = _Library(torch.cumsum)
    got = own_kernels.kernel_for("aten::cumsum", library)(x, dim, dtype=dtype)
    want = torch.cumsum(x, dim, dtype=dtype)
    assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
    for (given, kwargs) in library.calls:  # FlagGems scans the cast input in its dtype
        assert given[0].dtype == kwargs["dtype"] == want.dtype
    out = torch.empty(0, dtype=want.dtype, device=DEVICE)
    cumsum_out = own_kernels.kernel_for("aten::cumsum.out", _Library(torch.cumsum))
    assert cumsum_out(x, dim, dtype=dtype, out=out) is out and torch.equal(out, want)


def test_cumsum_declines_what_aten_refuses_or_it_does_not_take() -> None:
    cumsum = own_kernels.kernel_for("aten::cumsum", _Library(torch.cumsum))
    x = torch.arange(4, device=DEVICE)
    assert cumsum(x, 1) is NotImplemented  # dim out of range: ATen's error
    assert cumsum(x, 0, dtype=torch.complex64) is NotImplemented
    out = torch.empty(4, dtype=torch.int32, device=DEVICE)
    cumsum_out = own_kernels.kernel_for("aten::cumsum.out", _Library(torch.cumsum))
    assert cumsum_out(x, 0, out=out) is NotImplemented  # int64 scan, int32 out: ATen raises


def test_grouped_mm_gives_the_library_contiguous_weights() -> None:
    def library_grouped_mm(a, b, offs):
        assert b.is_contiguous()
        return torch._grouped_mm(a, b, offs=offs)

    library = _Library(library_grouped_mm)
    grouped_mm = own_kernels.kernel_for("aten::_grouped_mm", library)
    a = _randn(48, 32)
    w = _randn(4, 128, 32)  # experts' weights as a model keeps them, used transposed
    offs = torch.tensor([10, 20, 40, 48], dtype=torch.int32, device=DEVICE)
    got = grouped_mm(a, w.transpose(1, 2), offs)
    want = torch._grouped_mm(a, w.transpose(1, 2), offs=offs)
    _close(got, want)
    assert len(library.calls) == 1
    assert grouped_mm(a, w.transpose(1, 2)) is NotImplemented  # no offsets
    assert grouped_mm(a, w.transpose(1, 2), offs, out_dtype=torch.bfloat16) is NotImplemented


HISTC_CASES = {
    "experts' int32 ids": (lambda: torch.tensor([0, 1, 3, 3, 2, 1, 3], dtype=torch.int32,
                                                device=DEVICE), 4, 0, 3),
    "int64 past the range": (lambda: torch.arange(-5, 40, device=DEVICE), 7, 0, 30),
    "float32 from its extremes": (lambda: _randn(1000), 10, 0, 0),
    "float32 in a range, strided": (lambda: _randn(50, 40)[:, ::3], 8, -1.0, 1.5),
    "bf16 with NaN": (lambda: torch.tensor([0.5, float("nan"), 2.0, 3.0, -7.0],
                                           dtype=torch.bfloat16, device=DEVICE), 3, 0, 3),
    "one value": (lambda: torch.full((5,), 2.0, device=DEVICE), 4, 0, 0),
    # bin edges float32 would round: 0.1 + 1e-9 lies in bin 1 of [0, 0.3] by 3 in float64
    "float64 at a bin edge": (lambda: torch.tensor([0.0, 0.1 + 1e-9, 0.2, 0.3, 0.1 - 1e-9],
                                                   dtype=torch.float64, device=DEVICE), 3, 0, 0.3),
    "float64 from its extremes": (lambda: _randn(500, dtype=torch.float64), 7, 0, 0),
    "empty": (lambda: torch.empty(0, device=DEVICE), 5, 0, 1),
}


@pytest.mark.parametrize("case", HISTC_CASES)
def test_histc_counts_as_aten_does(case: str) -> None:
    make, bins, lo, hi = HISTC_CASES[case]
    x = make()
    got = own_kernels.kernel_for("aten::histc")(x, bins, lo, hi)
    # ATen's CPU histc takes floating inputs only; integers are counted as their values
    reference = x if x.dtype.is_floating_point else x.double()
    want = torch.histc(reference.float() if x.dtype == torch.bfloat16 else reference,
                       bins, lo, hi).to(x.dtype)
    assert got.dtype == x.dtype and torch.equal(got, want), (got, want)


def test_histc_declines_what_aten_refuses() -> None:
    histc = own_kernels.kernel_for("aten::histc")
    x = _randn(10)
    assert histc(x, 0) is NotImplemented
    assert histc(x, 4, 2.0, 1.0) is NotImplemented  # max below min
    assert histc(x, 4, 0.0, float("inf")) is NotImplemented
    assert histc(x.bool(), 4) is NotImplemented


PROD_CASES = {
    "patch grids, last dim": (lambda: torch.tensor([[1, 28, 40], [2, 14, 20]], device=DEVICE),
                              (-1,), {}),
    "past float32's integers": (lambda: torch.full((2, 3), 1000, dtype=torch.int32,
                                                   device=DEVICE), (1, True), {}),
    "int8 to int64 over 300": (lambda: torch.randint(-3, 4, (300, 2), dtype=torch.int8,
                                                     device=DEVICE), (0,), {}),
    "bool": (lambda: torch.rand(4, 5, device=DEVICE) > 0.2, (1,), {}),
    "wrapping int16": (lambda: torch.full((40,), 7, dtype=torch.int16, device=DEVICE), (0,),
                       {"dtype": torch.int16}),
    "all elements": (lambda: torch.arange(1, 21, device=DEVICE).view(4, 5), (), {}),
    "empty rows": (lambda: torch.empty(3, 0, dtype=torch.int64, device=DEVICE), (1,), {}),
}


@pytest.mark.parametrize("case", PROD_CASES)
def test_integer_products_are_exact_as_aten_s(case: str) -> None:
    make, args, kwargs = PROD_CASES[case]
    x = make()
    op = "aten::prod.dim_int" if args else "aten::prod"
    got = own_kernels.kernel_for(op)(x, *args, **kwargs)
    want = torch.prod(x, *args, **kwargs)
    assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


def test_prod_leaves_floating_inputs_to_flaggems() -> None:
    assert own_kernels.kernel_for("aten::prod")(_randn(3)) is NotImplemented
    prod_dim = own_kernels.kernel_for("aten::prod.dim_int")
    assert prod_dim(torch.arange(3, device=DEVICE), 1) is NotImplemented  # ATen's error
    assert prod_dim(torch.arange(3, device=DEVICE), 0, dtype=torch.float32) is NotImplemented


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int32])
def test_floor_matches_aten(dtype: torch.dtype) -> None:
    x = (_randn(6, 10) * 5).to(dtype)
    floor = own_kernels.kernel_for("aten::floor")
    for given in (x, x[:, ::3], x.t()):
        got = floor(given)
        assert torch.equal(got, torch.floor(given)) and got.stride() == torch.floor(given).stride()
    out = torch.empty(0, dtype=dtype, device=DEVICE)
    assert own_kernels.kernel_for("aten::floor.out")(x, out=out) is out
    assert torch.equal(out, torch.floor(x))


def _nonnegative(aten_op):
    """A stand-in for FlagGems' index kernels: ATen's, given only non-negative indices."""

    def kernel(self, indices, *args, **kwargs):
        for t in indices:
            assert t is None or t.dtype == torch.bool or bool((t >= 0).all()), t
        return aten_op(self, indices, *args, **kwargs)

    return _Library(kernel)


INDEX_CASES = {
    "negative rows": lambda x: [torch.tensor([-1, 0, -3], device=DEVICE)],
    "int32 and a slice": lambda x: [None, torch.tensor([[-2], [1]], dtype=torch.int32,
                                                       device=DEVICE)],
    "two broadcast": lambda x: [torch.tensor([[0], [-1]], device=DEVICE),
                                torch.tensor([-4, 2, 3], device=DEVICE)],
    "mask then negative": lambda x: [torch.tensor([True, False, True, True], device=DEVICE),
                                     torch.tensor([-1], device=DEVICE)],
    "empty": lambda x: [torch.tensor([], dtype=torch.int64, device=DEVICE)],
}


@pytest.mark.parametrize("case", INDEX_CASES)
def test_index_wraps_negative_indices(case: str) -> None:
    x = _randn(4, 5, 3)
    indices = INDEX_CASES[case](x)
    library = _nonnegative(torch.ops.aten.index.Tensor)
    got = own_kernels.kernel_for("aten::index.Tensor", library)(x, indices)
    assert torch.equal(got, torch.ops.aten.index.Tensor(x, indices))
    assert len(library.calls) == 1


@pytest.mark.parametrize("op", ["aten::index_put_", "aten::_index_put_impl_", "aten::index_put"])
def test_index_put_wraps_negative_indices(op: str) -> None:
    x = _randn(5, 4)
    idx = [torch.tensor([-1, 2, -1], device=DEVICE)]
    values = _randn(3, 4)
    aten = getattr(torch.ops.aten, op.split("::")[1])
    for accumulate in (False, True):
        want = x.clone()
        want = aten(want, idx, values, accumulate)
        got = x.clone()
        library = _nonnegative(aten)
        got = own_kernels.kernel_for(op, library)(got, idx, values, accumulate)
        torch.testing.assert_close(got, want)


def test_an_index_out_of_range_is_named_before_anything_is_written() -> None:
    x = _randn(4, 5)
    before = x.clone()
    for bad, value in [([None, torch.tensor([1, 5], device=DEVICE)], 5),
                       ([torch.tensor([-5], device=DEVICE)], -5)]:
        dim, size = (1, 5) if bad[0] is None else (0, 4)
        with pytest.raises(IndexError, match=f"index {value} is out of bounds for dimension "
                                             f"{dim} with size {size}"):
            own_kernels.kernel_for("aten::index_put_", _nonnegative(torch.ops.aten.index_put_))(
                x, bad, torch.zeros(1, device=DEVICE))
    assert torch.equal(x, before)
    index = own_kernels.kernel_for("aten::index.Tensor", _Library(torch.ops.aten.index.Tensor))
    assert index(x, [torch.tensor([0.5], device=DEVICE)]) is NotImplemented


def test_the_own_kernels_are_the_ops_listed() -> None:
    assert set(own_kernels.OPS) == {"aten::mul.Tensor", "aten::slice_backward",
                                    "aten::nll_loss_backward", "aten::cat", "aten::sum",
                                    "aten::sum.dim_IntList", "aten::native_group_norm",
                                    "aten::native_group_norm_backward",
                                    "aten::upsample_nearest2d", "aten::index.Tensor",
                                    "aten::_upsample_nearest_exact2d",
                                    "aten::index_put", "aten::index_put_",
                                    "aten::_index_put_impl_", "aten::cumsum",
                                    "aten::cumsum.out", "aten::_grouped_mm", "aten::histc",
                                    "aten::prod", "aten::prod.dim_int", "aten::floor",
                                    "aten::floor.out"}
    assert own_kernels.kernel_for("aten::add.Tensor") is None
    assert own_kernels.kernel_for("aten::cat") is None  # it needs the library's cat


HOPPER_MUL = '''
import torch


def mul(a, b):  # FlagGems' Hopper mul's indexing: both read flat, the result like a
    out = torch.empty_like(a)
    n = out.numel()
    flat = lambda t: t.as_strided((n,), (1,))
    torch.mul(flat(a), flat(b), out=flat(out))
    return out
'''


def test_the_guard_gives_what_flaggems_would_get_wrong_to_the_own_kernel(tmp_path) -> None:
    folder = tmp_path / "flag_gems" / "runtime" / "backend" / "_nvidia" / "hopper" / "ops"
    folder.mkdir(parents=True)
    (folder / "mul.py").write_text(textwrap.dedent(HOPPER_MUL))
    spec = importlib.util.spec_from_file_location("hopper_mul_stand_in", folder / "mul.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    served = []

    def own(a, b):
        served.append((a.shape, b.shape))
        return own_kernels.kernel_for("aten::mul.Tensor")(a, b)

    mul = guard_kernel(module.mul, own)
    a, b = _randn(2, 1), _randn(1, 16)
    _close(mul(a, b), a * b)  # flat indexing would give a [2, 1] result
    assert served == [(a.shape, b.shape)]
    same = _randn(4, 8)
    _close(mul(same, same), same * same)  # dense and alike: FlagGems' own kernel
    assert len(served) == 1
    assert guard_kernel(module.mul)(a, b) is NotImplemented  # no own kernel: declined

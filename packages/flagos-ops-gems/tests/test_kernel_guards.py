"""FlagGems' kernels with layout assumptions run only on the calls they compute as ATen
does (flagos_ops_gems/_kernel_guards.py); the others are declined to the chain's next
provider. The kernels here are CPU stand-ins with the same indexing as FlagGems' (flat
offsets, contiguous reads, group masks), in files at the paths FlagGems keeps them under."""

from __future__ import annotations

import importlib.util
import textwrap
from types import MappingProxyType

import flagos
import pytest
import torch
from flagos_ops_gems import KernelLibrary, register_library
from flagos_ops_gems._kernel_guards import guard_kernel, is_dense

OP = "aten::mul.Tensor"
FLAT_OPS = '''
import torch


def _flat(t, n):
    return t.as_strided((n,), (1,))  # n elements of memory from the tensor's first


def mul(a, b):
    if a.dim() != b.dim():
        return torch.mul(a, b)
    out = torch.empty_like(a)
    torch.mul(_flat(a, out.numel()), _flat(b, out.numel()), out=_flat(out, out.numel()))
    return out


def fill_scalar_(self, value):
    _flat(self, self.numel()).fill_(value)
    return self


def fill_scalar_out(input, value, *, out=None):
    _flat(out, out.numel()).fill_(value)
    return out


def sqrt(a):
    out = torch.empty_like(a)
    out.copy_(a.float().sqrt())
    return out


def mm(a, b):
    return a @ b


def mm_out(a, b, *, out):
    return torch.mm(a, b, out=out)
'''


# FlagGems' generic kernels' indexing (flag_gems/ops/groupnorm.py, upsample_nearest2d.py,
# slice_backward.py), in PyTorch
GENERIC_OPS = '''
import torch


def _as_contiguous(t):  # the memory from t's first element read as a contiguous tensor
    return t.as_strided(t.shape, torch.empty(t.shape).stride())


def group_norm(input, weight, bias, N, C, HxW, group, eps=1e-05):
    size = C // group
    block = 1 << (size - 1).bit_length()  # rows masked by channel < C, not by the group
    x = input.reshape(N, C * HxW)
    y, mean, rstd = torch.empty_like(x), torch.empty(N, group), torch.empty(N, group)
    for n in range(N):
        for g in range(group):
            rows = slice(g * size * HxW, min(g * size + block, C) * HxW)
            v = x[n, rows]
            mean[n, g] = v.sum() / (size * HxW)
            var = ((v - mean[n, g]) ** 2).sum() / (size * HxW)
            rstd[n, g] = (var + eps).rsqrt()
            c = torch.arange(g * size, min(g * size + block, C)).repeat_interleave(HxW)
            y[n, rows] = (v - mean[n, g]) * rstd[n, g] * weight[c] + bias[c]
    return y.reshape(input.shape), mean, rstd


def group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    raise AssertionError("a declined call reached the kernel")


def upsample_nearest2d(input, output_size, scales_h=None, scales_w=None):
    return torch.nn.functional.interpolate(_as_contiguous(input), size=list(output_size))


def slice_backward(grad_output, input_sizes, dim, start, end, step):
    grad = torch.zeros(input_sizes)
    index = [slice(None)] * len(input_sizes)
    index[dim] = slice(start, end, step)
    grad[tuple(index)] = _as_contiguous(grad_output)
    return grad
'''


def _load(folder, file: str, source: str = FLAT_OPS):
    path = folder / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(f"flat_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def hopper(tmp_path):
    return _load(tmp_path / "flag_gems" / "runtime" / "backend" / "_nvidia" / "hopper" / "ops",
                 "mul.py")


def test_is_dense() -> None:
    x = torch.randn(4, 6, 8)
    assert is_dense(x) and is_dense(x.permute(2, 0, 1)) and is_dense(x[:1])
    assert is_dense(x[:, :1, :].squeeze(1)[:1])
    assert not is_dense(x[:, ::2]) and not is_dense(x[..., :4]) and not is_dense(x[:, :1])
    assert not is_dense(torch.ones(()).expand(4, 8)) and is_dense(torch.ones(()))


def test_mul_runs_only_where_flat_indexing_is_exact(hopper) -> None:
    mul = guard_kernel(hopper.mul)
    assert mul is not hopper.mul
    a = torch.randn(4, 8)
    torch.testing.assert_close(mul(a, a * 2), a * a * 2)
    torch.testing.assert_close(mul(a.t(), (a * 2).t()), (a * a * 2).t())  # one layout
    torch.testing.assert_close(mul(a, torch.randn(8)).shape, (4, 8))  # ranks differ: generic
    declined = [(torch.randn(2, 1), torch.randn(1, 16)),  # broadcast
                (torch.full((), 3.0).expand(4, 8), a),  # expanded
                (a, a.t().contiguous().t()),  # layouts differ
                (a, a.double()),  # dtypes differ: the result would take the first's
                (a[:, ::2], a[:, 1::2]),  # not dense
                (torch.randn(4, 8, dtype=torch.complex64),  # complex: a's shape
                 torch.randn(1, 8, dtype=torch.complex64))]
    for x, y in declined:
        assert mul(x, y) is NotImplemented, (x.shape, x.stride(), y.shape, y.stride())


def test_sqrt_and_fill_out_decline_what_they_would_get_wrong(tmp_path) -> None:
    ops = _load(tmp_path / "runtime" / "backend" / "_nvidia" / "hopper" / "ops", "sqrt.py")
    sqrt = guard_kernel(ops.sqrt)
    torch.testing.assert_close(sqrt(torch.arange(4.0)), torch.arange(4.0).sqrt())
    for x in (torch.arange(4), torch.arange(4.0, dtype=torch.float64),  # int, float64
              torch.arange(8.0)[::2], torch.empty(2**31, device="meta")):  # sliced, huge
        assert sqrt(x) is NotImplemented, x.dtype
    fills = _load(tmp_path / "runtime" / "backend" / "_nvidia" / "hopper" / "ops", "fill.py")
    fill_out = guard_kernel(fills.fill_scalar_out)
    assert fill_out(torch.zeros(4), 1.0, out=torch.empty(0)) is NotImplemented  # to resize
    assert torch.equal(fill_out(torch.zeros(4), 1.0, out=torch.empty(4)), torch.ones(4))


def test_mm_declines_what_its_descriptors_cannot_take(tmp_path) -> None:
    ops = _load(tmp_path / "runtime" / "backend" / "_nvidia" / "hopper" / "ops", "mm.py")
    mm, mm_out = guard_kernel(ops.mm), guard_kernel(ops.mm_out)
    a, b = torch.randn(16, 32), torch.randn(32, 24)
    torch.testing.assert_close(mm(a, b), a @ b)
    torch.testing.assert_close(mm(a.t().contiguous().t(), b), a @ b)  # column-major
    torch.testing.assert_close(mm(a, b[:, :1]), a @ b[:, :1])  # one column: its gemv
    big = torch.randn(16, 40)
    declined = [(big[:, 1:33], b),  # an offset slice: unaligned base
                (torch.ones(1, 32).expand(16, 32), b),  # expanded
                (torch.randn(0, 32), b), (a.double(), b.double()), (a, b.half()),
                (torch.randn(16, 5), torch.randn(4, 8))]  # shapes do not chain
    for x, y in declined:
        assert mm(x, y) is NotImplemented, (x.shape, x.stride(), x.dtype, y.dtype)
    assert mm(big[:, 1:6], torch.randn(5, 24)) is not NotImplemented  # K % 4: no TMA
    out = torch.empty(16, 24)
    assert mm_out(a, b, out=out) is out
    assert mm_out(a, b, out=torch.empty(0)) is NotImplemented  # ATen resizes out=
    assert mm_out(a, b[:, :1], out=torch.empty(16, 2)[:, :1]) is NotImplemented  # gemv rows
    assert mm_out(a, b, out=torch.empty(24, 16).t()) is NotImplemented  # TMA: contiguous


def test_fill_of_a_slice_is_declined(tmp_path) -> None:
    ops = _load(tmp_path / "runtime" / "backend" / "_nvidia" / "hopper" / "ops", "fill.py")
    fill_ = guard_kernel(ops.fill_scalar_)
    x = torch.zeros(4, 4)
    assert fill_(x[:, 0], 1.0) is NotImplemented and not x.any()
    assert fill_(torch.empty(2**31, device="meta"), 1.0) is NotImplemented  # 32-bit offsets
    fill_(x[1:3], 1.0)  # dense rows: served
    assert torch.equal(x[1:3], torch.ones(2, 4)) and x.sum() == 8


def test_kernels_elsewhere_are_not_wrapped(tmp_path) -> None:
    ops = _load(tmp_path / "flag_gems" / "ops", "mul.py")
    assert guard_kernel(ops.mul) is ops.mul
    other = _load(tmp_path / "runtime" / "backend" / "_nvidia" / "hopper" / "ops", "sub.py")
    assert guard_kernel(other.mul) is other.mul  # not a file the list names


def _generic(tmp_path, file: str):
    return _load(tmp_path / "flag_gems" / "ops", file, GENERIC_OPS)


def test_group_norm_runs_only_with_power_of_two_channels_per_group(tmp_path) -> None:
    ops = _generic(tmp_path, "groupnorm.py")
    group_norm = guard_kernel(ops.group_norm)
    assert group_norm is not ops.group_norm
    w, b = torch.randn(96), torch.randn(96)
    x = torch.randn(2, 96, 4, 4)
    assert group_norm(x, w, b, 2, 96, 16, 32, 1e-5) is NotImplemented  # 3 per group
    assert not torch.allclose(ops.group_norm(x, w, b, 2, 96, 16, 32, 1e-5)[0],
                              torch.native_group_norm(x, w, b, 2, 96, 16, 32, 1e-5)[0])
    got = group_norm(x, w, b, 2, 96, 16, 24, 1e-5)  # 4 per group: served, and right
    torch.testing.assert_close(got[0], torch.native_group_norm(x, w, b, 2, 96, 16, 24, 1e-5)[0])
    backward = guard_kernel(ops.group_norm_backward)
    mean, rstd = torch.randn(2, 32), torch.randn(2, 32)
    assert backward(x, x, mean, rstd, w, 2, 96, 16, 32, [True, True, True]) is NotImplemented


def test_upsample_and_slice_backward_read_only_contiguous_inputs(tmp_path) -> None:
    up = _generic(tmp_path, "upsample_nearest2d.py")
    upsample = guard_kernel(up.upsample_nearest2d)
    x = torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(upsample(x, [8, 8]), torch._C._nn.upsample_nearest2d(x, [8, 8]))
    last = x.to(memory_format=torch.channels_last)
    assert upsample(last, [8, 8]) is NotImplemented
    assert not torch.equal(up.upsample_nearest2d(last, [8, 8]), upsample(x, [8, 8]))
    sb = _generic(tmp_path, "slice_backward.py")
    slice_backward = guard_kernel(sb.slice_backward)
    g = torch.randn(2, 4, 12, 8)
    torch.testing.assert_close(slice_backward(g[..., :4].contiguous(), [2, 4, 12, 8], 3, 0, 4, 1),
                               torch.ops.aten.slice_backward(g[..., :4], [2, 4, 12, 8], 3, 0, 4, 1))
    assert slice_backward(g[..., :4], [2, 4, 12, 8], 3, 0, 4, 1) is NotImplemented


@pytest.fixture
def flat_provider(hopper):
    class Library(KernelLibrary):
        name = "flatmul"
        keyword_aliases = MappingProxyType({})

        def load(self):
            return {OP: guard_kernel(hopper.mul)}, frozenset({"cpu", "cuda"})

    flagos.routing.register_provider(register_library("flatmul", Library()))
    flagos.routing.reset_stats()
    with flagos.routing.override({OP: ["flatmul", "boxing", "cpu"]}):
        yield "flatmul"


def _stat(provider: str, key: str) -> int:
    return flagos.routing.stats().get(OP, {}).get(provider, {}).get(key, 0)


def test_declined_calls_run_on_the_next_provider(flat_provider) -> None:
    t = torch.tensor([10.0, 20.0])
    freqs = torch.arange(16.0)
    # a diffusers time embedding's broadcast, and a gradient through sum (expanded)
    got = t.to("flagos")[:, None] * freqs.to("flagos")[None, :]
    torch.testing.assert_close(got.cpu(), t[:, None] * freqs[None, :])
    y = torch.randn(4, 8, 64)
    x = y.to("flagos").requires_grad_()
    (x * x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), 2 * y)
    assert _stat(flat_provider, "declined") >= 3  # the broadcast, and both grad muls
    assert _stat(flat_provider, "calls") >= 1  # x * x: one layout, served


def test_a_unet_blocks_declined_calls_match_the_cpu(tmp_path) -> None:
    norm_ops = _generic(tmp_path, "groupnorm.py")
    up_ops = _generic(tmp_path, "upsample_nearest2d.py")
    ops = {"aten::native_group_norm": guard_kernel(norm_ops.group_norm),
           "aten::upsample_nearest2d": guard_kernel(up_ops.upsample_nearest2d)}

    class Library(KernelLibrary):
        name = "unetops"
        keyword_aliases = MappingProxyType({})

        def load(self):
            return ops, frozenset({"cpu", "cuda"})

    flagos.routing.register_provider(register_library("unetops", Library()))
    flagos.routing.reset_stats()
    torch.manual_seed(0)
    x = torch.randn(2, 96, 4, 4)
    norms = [torch.nn.GroupNorm(32, 96), torch.nn.GroupNorm(24, 96)]  # 3 and 4 per group
    with torch.no_grad(), flagos.routing.override({op: ["unetops", "boxing", "cpu"]
                                                   for op in ops}):
        for norm in norms:
            got = norm.to("flagos")(x.to("flagos")).cpu()
            torch.testing.assert_close(got, norm.cpu()(x))
        last = x.to(memory_format=torch.channels_last)
        got = torch.nn.functional.interpolate(last.to("flagos"), scale_factor=2.0).cpu()
        torch.testing.assert_close(got, torch.nn.functional.interpolate(last, scale_factor=2.0))
    stats = flagos.routing.stats()
    assert stats["aten::native_group_norm"]["unetops"]["declined"] == 1
    assert stats["aten::native_group_norm"]["unetops"]["calls"] >= 1
    assert stats["aten::upsample_nearest2d"]["unetops"]["declined"] == 1


_x = torch.randn(4, 6)
_w8 = torch.randn(8)
# (file, function, a call the guard declines, a call it lets through): each condition of
# _kernel_guards.py on one call that breaks it and one that meets it
GENERIC_CASES = [
    ("layernorm.py", "layer_norm_backward",
     ((torch.randn(2, 3, 8), torch.randn(2, 3, 8), [8]), {}),
     ((torch.randn(6, 8), torch.randn(6, 8), [8]), {})),
    ("batch_norm.py", "batch_norm",
     ((torch.randn(2, 3, 4), None, None, None, None, True, 0.1, 1e-5), {}),
     ((torch.randn(2, 3, 4), None, None, torch.zeros(3), torch.ones(3), True, 0.1, 1e-5), {})),
    ("layernorm.py", "layer_norm", ((torch.randn(2, 3, 8).half(), [8]), {}),
     ((torch.randn(2, 3, 8), [8]), {})),
    ("layernorm.py", "layer_norm", ((torch.randn(0, 8), [8]), {}),
     ((torch.randn(6, 8).half(), [8]), {})),
    ("batch_norm.py", "batch_norm",
     ((torch.randn(2, 3, 4).half(), None, None, torch.zeros(3), torch.ones(3), True, 0.1,
       1e-5), {}),
     ((torch.randn(2, 3, 4).half(), None, None, torch.zeros(3), torch.ones(3), False, 0.1,
       1e-5), {})),
    ("batch_norm.py", "batch_norm_backward",
     ((_x, _x, None, None, None, None, None, False, 1e-5, [True, True, True]), {}),
     ((_x, _x, None, None, None, None, None, True, 1e-5, [True, True, True]), {})),
    ("nllloss.py", "nll_loss_backward", ((_x, _x, torch.zeros(4, dtype=torch.long)), {}), None),
    ("softmax.py", "softmax_backward", ((_x.t(), _x.t(), 0, torch.float32), {}),
     ((_x, _x, 0, torch.float32), {})),
    ("_safe_softmax.py", "_safe_softmax", ((torch.randn(2, 5000), -1), {}), ((_x, -1), {})),
    ("sum.py", "sum", ((torch.ones(4, dtype=torch.int8),), {}), ((_x,), {})),
    ("sum.py", "sum", ((torch.ones(4, dtype=torch.int8),), {"dtype": torch.int64}),
     ((_x.half(),), {"dtype": torch.float32})),
    ("sum.py", "sum_dim_out", ((_x, [0]), {"out": torch.empty(6, 2)[:, 0]}),
     ((_x, [0]), {"out": torch.empty(6)})),
    ("var.py", "var_correction", ((_x, []), {}), ((_x, [0]), {})),
    ("_safe_softmax.py", "_safe_softmax", ((_x.double(), -1), {}), ((_x, 0), {})),
    ("cat.py", "cat", (([_x, _x.double()],), {}), (([_x, _x, torch.empty(0)],), {})),
    ("group_gemm.py", "group_mm", ((_x, torch.randn(2, 6, 4)), {}),
     ((_x, torch.randn(2, 6, 4), torch.tensor([2, 4], dtype=torch.int32)), {})),
    ("slice_scatter.py", "slice_scatter", ((_x, _x[:, :2], 1, -2), {}),
     ((_x, _x[:, :2], 1, 0, 2), {})),
    ("max_pool2d_with_indices.py", "max_pool2d_backward", ((_x[None], _x[None], [2, 2]), {}),
     None),
    ("prod.py", "prod", ((_x.double(),), {}), ((_x,), {})),
    ("var.py", "var", ((_x.half(),), {}), ((_x,), {})),
    ("scatter_add_.py", "scatter_add_", ((_x, 0, torch.zeros(4, 6, dtype=torch.long), _x), {}),
     ((_x, 1, torch.zeros(4, 6, dtype=torch.long), _x), {})),
    ("scatter.py", "scatter", ((_x[:, :3], 1, torch.zeros(4, 3, dtype=torch.long), _x), {}),
     ((_x, 1, torch.zeros(4, 3, dtype=torch.long), _x), {})),
    ("masked_scatter.py", "masked_scatter", ((_x[0], torch.ones(4, 6, dtype=torch.bool), _x), {}),
     ((_x, torch.ones(4, 1, dtype=torch.bool), _x), {})),
    ("topk.py", "topk", ((_x.t(), 2), {}), ((_x, 2), {})),
    ("sort.py", "sort", ((torch.randn(4, 1), -1), {}), ((_x, -1), {})),
    ("zeros.py", "zero_", ((_x[:, :2],), {}), ((_x,), {})),
    ("zero.py", "zero", ((_x,), {}), None),
    ("upsample_bicubic2d.py", "upsample_bicubic2d",
     ((torch.randn(1, 1, 5, 5), [7, 7], False, 1.5, 1.5), {}),
     ((torch.randn(1, 1, 5, 5), [10, 10], False), {})),
    ("_upsample_nearest_exact1d.py", "_upsample_nearest_exact1d",
     ((torch.randn(1, 1, 4), [2]), {}), ((torch.randn(1, 1, 4), [8]), {})),
    ("_upsample_nearest_exact1d.py", "_upsample_nearest_exact1d",
     ((torch.randn(1, 1, 10), [20], 2.09), {}), ((torch.randn(1, 1, 10), [20], None), {})),
    ("vdot.py", "vdot", ((_w8.double(), _w8.double()), {}), ((_w8, _w8), {})),
    ("vstack.py", "vstack", (([_x.t(), _x.t()],), {}), (([_x, _x],), {})),
    ("index.py", "index", ((_x, [torch.tensor([-1])]), {}), None),
    ("index_select.py", "index_select", ((_x, 0, torch.arange(4)[::2]), {}),
     ((_x, 0, torch.arange(2)), {})),
    ("addmm.py", "addmm", ((_x, _x, _x.t()), {"beta": 0}), ((_x, _x, _x.t()), {"beta": 1})),
    ("baddbmm.py", "baddbmm", ((_x[None], _x[None], _x.t()[None]), {"beta": 0.0}),
     ((_x[None], _x[None], _x.t()[None]), {})),
    ("argmin.py", "argmin", ((_x, 1), {}), None),
    ("argmax.py", "argmax", ((_x.t(),), {}), ((_x.t(), 0), {})),
    ("cumsum.py", "cumsum", ((torch.ones(4, dtype=torch.int32), 0), {}), ((_x, 0), {})),
    ("cat.py", "cat", (([_x],), {}), (([_x, _x],), {})),
    ("all.py", "all_dims", ((_x > 0, []), {}), ((_x > 0, [0]), {})),
    ("select_backward.py", "select_backward", ((_x[:, 0], [4, 6], 1, -1), {}),
     ((_x[:, 0], [4, 6], 1, 5), {})),
    ("mean.py", "mean_dim", ((_x, None), {}), ((_x, [1]), {})),
    ("max_pool2d_with_indices.py", "max_pool2d_with_indices", ((_x[None, None], [2, 2], []), {}),
     ((_x[None, None], [2, 2], [2, 2]), {})),
    ("cummax.py", "cummax", ((_x > 0, 0), {}), ((_x, 0), {})),
    ("embedding_dense_backward.py", "embedding_dense_backward",
     ((_x.double(), torch.zeros(4, dtype=torch.long), 10, -1, False), {}),
     ((_x, torch.zeros(4, dtype=torch.long), 10, -1, False), {})),
    ("avg_pool2d.py", "avg_pool2d", ((torch.randn(1, 1, 5, 5), [2, 2], [2, 2], 0, True, True), {}),
     ((torch.randn(1, 1, 5, 5), [2, 2], [2, 2], 0, True, False), {})),
    ("dot.py", "dot", ((_x[:, 0], _x[:, 1]), {}), ((_w8, _w8), {})),
    ("layernorm.py", "layer_norm_backward", ((), {}), None),  # unforeseen arguments: declined
]


@pytest.mark.parametrize("file, function, declined, served", GENERIC_CASES,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(GENERIC_CASES)])
def test_generic_kernel_conditions(tmp_path, file, function, declined, served) -> None:
    source = f"def {function}(*args, **kwargs):\n    return 'ran'\n"
    kernel = getattr(_load(tmp_path / "flag_gems" / "ops", file, source), function)
    guarded = guard_kernel(kernel)
    assert guarded is not kernel, f"{file}:{function} is not guarded"
    args, kwargs = declined
    assert guarded(*args, **kwargs) is NotImplemented
    if served is not None:
        args, kwargs = served
        assert guarded(*args, **kwargs) == "ran"

"""Ops that belong to the runtime: copies in every direction, views, resize_, set_,
as_strided, _local_scalar_dense, fill_/zero_.

The whole module runs twice: in this process (sim memory aliased by the CPU) and, through
``test_staged_path_without_host_alias``, in a child with FLAGOS_NO_TWIN=1, where
every copy takes the staged path that HALs with opaque device memory use.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

F = torch.flagos
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64]


def _values(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    x = torch.arange(int(torch.tensor(shape).prod())).reshape(shape)
    if dtype == torch.bool:
        return x % 3 == 0
    if dtype.is_complex:
        return torch.complex(x.float(), -x.float()).to(dtype)
    return (x % 100).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_flagos_round_trip(dtype):
    x = _values((5, 7), dtype)
    d = x.to("flagos")
    assert d.device.type == "flagos" and d.dtype == dtype
    assert torch.equal(d.cpu(), x)


def test_non_contiguous_both_ways():
    x = torch.arange(60.0).reshape(3, 4, 5)
    d = x.to("flagos")
    for view in (lambda t: t.transpose(0, 2), lambda t: t[:, ::2, 1:], lambda t: t.permute(1, 2, 0),
                 lambda t: t[..., 3], lambda t: t.flip(0) if t.device.type == "cpu" else
                 t.cpu().flip(0).to("flagos")):
        assert torch.equal(view(d).cpu(), view(x))
    # CPU non-contiguous -> flagos contiguous
    assert torch.equal(x.transpose(0, 1).to("flagos").cpu(), x.transpose(0, 1))
    # flagos non-contiguous destination, gaps must keep their bytes
    dst = torch.zeros(4, 6, device="flagos")
    dst[:, ::2] = torch.ones(4, 3)
    want = torch.zeros(4, 6)
    want[:, ::2] = 1
    assert torch.equal(dst.cpu(), want)
    dst.t().copy_(torch.arange(24.0).reshape(6, 4))
    assert torch.equal(dst.cpu(), torch.arange(24.0).reshape(6, 4).t())


def test_cpu_non_contiguous_into_flagos_non_contiguous():
    src = torch.arange(20.0).reshape(4, 5)[:, 1:4]  # 4x3, strided
    dst = torch.full((3, 8), -1.0, device="flagos")
    dst.t()[1:5].copy_(src.t().t())
    want = torch.full((3, 8), -1.0)
    want.t()[1:5].copy_(src)
    assert torch.equal(dst.cpu(), want)


@pytest.mark.parametrize("src_dtype,dst_dtype", [
    (torch.float32, torch.float16), (torch.float32, torch.int64), (torch.int32, torch.float64),
    (torch.bfloat16, torch.float32), (torch.bool, torch.float32), (torch.float64, torch.uint8),
])
def test_dtype_conversion_every_direction(src_dtype, dst_dtype):
    x = _values((4, 6), src_dtype)
    want = x.to(dst_dtype)
    assert torch.equal(x.to("flagos", dst_dtype).cpu(), want)  # cpu -> flagos
    d = x.to("flagos")
    assert torch.equal(d.to(dst_dtype).cpu(), want)  # flagos -> flagos
    assert torch.equal(d.to("cpu", dst_dtype), want)  # flagos -> cpu
    out = torch.empty(6, 4, dtype=dst_dtype).t()
    out.copy_(d)  # flagos -> strided cpu of another dtype
    assert torch.equal(out, want)


def test_broadcast_copies():
    dst = torch.zeros(3, 4, device="flagos")
    dst.copy_(torch.arange(4.0))  # cpu row broadcast
    assert torch.equal(dst.cpu(), torch.arange(4.0).expand(3, 4))
    dst.copy_(torch.tensor([[1.0], [2.0], [3.0]], device="flagos"))  # flagos column broadcast
    assert torch.equal(dst.cpu(), torch.tensor([[1.0], [2.0], [3.0]]).expand(3, 4))
    dst.copy_(torch.tensor(5, dtype=torch.int32))  # scalar, other dtype
    assert bool((dst.cpu() == 5).all())
    cpu = torch.zeros(2, 3)
    cpu.copy_(torch.tensor([7.0, 8.0, 9.0], device="flagos"))
    assert torch.equal(cpu, torch.tensor([7.0, 8.0, 9.0]).expand(2, 3))


def test_device_to_device_same_hal(two_devices):
    x = torch.arange(30.0).reshape(5, 6)
    a = x.to("flagos:0")
    b = a.to("flagos:1")
    assert b.device.index == 1 and torch.equal(b.cpu(), x)
    c = torch.empty(6, 5, device="flagos:1", dtype=torch.float64)
    c.copy_(a.t())
    assert torch.equal(c.cpu(), x.t().double())
    d = torch.zeros(5, 12, device="flagos:0")[:, ::2]
    d.copy_(b)
    assert torch.equal(d.cpu(), x)


def test_copy_conj_and_neg():
    z = torch.complex(torch.arange(4.0), torch.ones(4))
    d = z.to("flagos").conj()
    assert torch.equal(d.cpu(), z.conj())
    out = torch.empty(4, dtype=torch.complex64, device="flagos")
    out.copy_(z.conj())
    assert torch.equal(out.cpu(), z.conj().resolve_conj())


def test_copy_from_and_resize():
    out = torch.empty(0, device="flagos")
    res = torch.neg(torch.tensor([1.0, 2.0, 3.0], device="flagos"), out=out)
    assert res.data_ptr() == out.data_ptr() and out.shape == (3,)
    assert out.cpu().tolist() == [-1.0, -2.0, -3.0]
    cpu_out = torch.empty(0)
    torch.ops.aten._copy_from_and_resize(torch.arange(5.0, device="flagos"), cpu_out)
    assert cpu_out.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    dev_out = torch.empty(1, device="flagos")
    torch.ops.aten._copy_from_and_resize(torch.arange(6.0).reshape(2, 3), dev_out)
    assert dev_out.shape == (2, 3) and dev_out.cpu().tolist() == [[0, 1, 2], [3, 4, 5]]


def test_empty_and_empty_strided():
    e = torch.empty(3, 4, device="flagos", dtype=torch.float16)
    assert e.shape == (3, 4) and e.dtype == torch.float16 and e.is_contiguous()
    s = torch.empty_strided((2, 3), (1, 2), device="flagos")
    assert s.stride() == (1, 2)
    cl = torch.empty(2, 3, 4, 5, device="flagos", memory_format=torch.channels_last)
    assert cl.is_contiguous(memory_format=torch.channels_last)
    assert torch.empty(0, device="flagos").numel() == 0
    with pytest.raises(RuntimeError, match="pinned"):
        torch.empty(2, device="flagos", pin_memory=True)


def test_views_and_reshape_alias():
    x = torch.arange(24.0, device="flagos")
    v = x.view(4, 6)
    assert v.data_ptr() == x.data_ptr() and v._base is x
    r = torch.ops.aten._reshape_alias(x, (2, 12), (12, 1))
    assert r.data_ptr() == x.data_ptr() and r.shape == (2, 12)
    v[1, 2] = 100.0
    assert x[8].item() == 100.0
    t = v.t()
    assert not t.is_contiguous()
    assert t.reshape(24).data_ptr() != x.data_ptr()  # needs a copy
    assert torch.equal(v.view(torch.int32).cpu(), v.cpu().view(torch.int32))
    un = x.unflatten(0, (2, 3, 4))
    assert un.shape == (2, 3, 4) and un.data_ptr() == x.data_ptr()


def test_backend_view_ops_are_views():
    # unfold and view_as_real/complex have a kernel per backend, no composite one: on
    # opaque memory they must not fall back to a CPU copy that autograd takes for a view.
    x = torch.arange(12.0, device="flagos")
    u = x.unfold(0, 4, 2)
    assert u._base is x and u.data_ptr() == x.data_ptr()
    assert torch.equal(u.cpu(), torch.arange(12.0).unfold(0, 4, 2))
    u[1].zero_()  # elements 2..5 of x
    assert x.cpu()[2:6].tolist() == [0.0] * 4
    c = torch.view_as_complex(x.view(6, 2))
    assert c.dtype == torch.complex64 and c.data_ptr() == x.data_ptr()
    c.mul_(2)
    assert x.cpu().tolist() == (torch.arange(12.0).index_fill(0, torch.arange(2, 6), 0) * 2).tolist()
    r = torch.view_as_real(c)
    assert r.data_ptr() == x.data_ptr() and torch.equal(r.cpu().flatten(), x.cpu())
    r.fill_(1.0)
    assert x.cpu().tolist() == [1.0] * 12


def test_as_strided():
    x = torch.arange(16.0, device="flagos")
    w = x.as_strided((3, 3), (4, 1), 1)
    assert w.data_ptr() == x.data_ptr() + 4
    assert torch.equal(w.cpu(), torch.arange(16.0).as_strided((3, 3), (4, 1), 1))
    diag = x.as_strided((4,), (5,))
    assert diag.cpu().tolist() == [0.0, 5.0, 10.0, 15.0]
    diag.zero_()
    assert x.cpu()[::5].tolist() == [0.0] * 4


def test_resize_():
    x = torch.arange(6.0, device="flagos")
    ptr = x.data_ptr()
    x.resize_(2, 3)
    assert x.shape == (2, 3) and x.data_ptr() == ptr  # shrink/same: in place
    assert x.cpu().flatten().tolist() == [0, 1, 2, 3, 4, 5]
    x.resize_(4, 4)
    assert x.shape == (4, 4)
    assert x.flatten()[:6].cpu().tolist() == [0, 1, 2, 3, 4, 5]  # bytes kept on growth
    assert x.untyped_storage().nbytes() >= 64
    y = torch.empty(0, device="flagos")
    y.resize_(3, 5, memory_format=torch.contiguous_format)
    assert y.shape == (3, 5) and y.is_contiguous()
    z = torch.empty(2, 3, 4, 5, device="flagos")
    z.resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert z.is_contiguous(memory_format=torch.channels_last)
    x.untyped_storage().resize_(8)
    assert x.untyped_storage().nbytes() == 8


def test_set_overloads():
    src = torch.arange(12.0, device="flagos")
    a = torch.empty(0, device="flagos")
    a.set_(src)
    assert a.data_ptr() == src.data_ptr() and a.shape == (12,)
    b = torch.empty(0, device="flagos")
    b.set_(src.untyped_storage())
    assert b.shape == (12,) and b.data_ptr() == src.data_ptr()
    c = torch.empty(0, device="flagos")
    c.set_(src.untyped_storage(), 2, (2, 3), (3, 1))
    assert c.cpu().tolist() == [[2, 3, 4], [5, 6, 7]]
    d = torch.empty(0, device="flagos")
    d.set_(src.untyped_storage(), 1, (3,))
    assert d.cpu().tolist() == [1.0, 2.0, 3.0]
    c.set_()
    assert c.numel() == 0 and c.device.type == "flagos"
    with pytest.raises(RuntimeError, match="too small"):
        torch.empty(0, device="flagos").set_(src.untyped_storage(), 10, (5,), (1,))
    with pytest.raises(RuntimeError):
        torch.empty(0, device="flagos").set_(torch.arange(3.0).untyped_storage())


def test_local_scalar_dense_and_item():
    for dtype, value in [(torch.float32, 2.5), (torch.int64, -7), (torch.bool, True),
                         (torch.float16, 0.5), (torch.bfloat16, 4.0), (torch.float64, 1e-300)]:
        t = torch.tensor(value, dtype=dtype, device="flagos")
        assert t.item() == value
        assert torch.ops.aten._local_scalar_dense(t) == value
    z = torch.tensor(1 + 2j, device="flagos")
    assert z.item() == 1 + 2j
    x = torch.arange(10.0, device="flagos")
    assert x[7].item() == 7.0 and float(x[3]) == 3.0 and int(x[9]) == 9
    assert bool(x[0] == 0)
    with pytest.raises(RuntimeError, match="elements cannot be converted to Scalar"):
        x.item()


def test_fill_and_zero():
    x = torch.empty(3, 5, device="flagos")
    x.fill_(2.5)
    assert bool((x.cpu() == 2.5).all())
    x.zero_()
    assert bool((x.cpu() == 0).all())
    x[:, 1].fill_(7)  # strided fill
    x.t()[3].fill_(-1)
    want = torch.zeros(3, 5)
    want[:, 1] = 7
    want[:, 3] = -1
    assert torch.equal(x.cpu(), want)
    x[::2].zero_()  # non-dense zero
    want[::2] = 0
    assert torch.equal(x.cpu(), want)
    i = torch.empty(4, dtype=torch.int16, device="flagos").fill_(-3)
    assert i.cpu().tolist() == [-3] * 4
    b = torch.empty(4, dtype=torch.bool, device="flagos").fill_(True)
    assert b.cpu().tolist() == [True] * 4
    f = torch.full((2, 2), 9.0, device="flagos")
    assert f.cpu().tolist() == [[9.0, 9.0], [9.0, 9.0]]
    assert torch.zeros(3, device="flagos").sum().item() == 0
    assert torch.ones(3, dtype=torch.float16, device="flagos").cpu().tolist() == [1.0] * 3


def test_zero_on_side_stream_is_ordered(device0):
    s = F.Stream()
    x = torch.ones(1 << 20, device="flagos")
    with F.stream(s):
        x.zero_()
        total = x.sum().item()
    assert total == 0


@pytest.mark.skipif(os.environ.get("FLAGOS_NO_TWIN") == "1",
                    reason="already the staged run")
def test_staged_path_without_host_alias():
    """Re-run this module with FLAGOS_NO_TWIN=1 (copies staged through the host)."""
    # Compute goes to the CPU fallback: the boxing provider needs host-addressable memory.
    env = dict(os.environ, FLAGOS_NO_TWIN="1", FLAGOS_HAL="sim", FLAGOS_ROUTES="default=cpu")
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(torch.flagos.__file__)),
         *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         "--import-mode=importlib", __file__],
        env=env, capture_output=True, text=True, timeout=240, check=False,
        cwd=os.path.dirname(__file__))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and "1 skipped" in proc.stdout

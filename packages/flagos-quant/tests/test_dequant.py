"""The dequantization rules, bit for bit against each format's rule written from its bit
layout (reference_rules), on CPU and on flagos tensors."""

from __future__ import annotations

import pytest
import reference_rules as ref
import torch
from flagos_quant.dequant import dequantize_fp4, dequantize_fp8
from flagos_quant.fp4 import E2M1_VALUES, pack_fp4, round_to_e2m1, unpack_fp4
from flagos_quant.scales import from_blocked, to_blocked

DEVICES = ["cpu", "flagos"]


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal as float32 bit patterns (-0 != +0), NaN where the reference has NaN (a NaN's
    sign and payload are not part of any format's rule)."""
    a = a.cpu().contiguous()
    nan = b.isnan()
    if not torch.equal(a.isnan(), nan):
        return False
    return torch.equal(a[~nan].view(torch.int32), b[~nan].contiguous().view(torch.int32))


def _all_bytes(dtype: torch.dtype, rows: int = 16) -> torch.Tensor:
    """Every one of the 256 byte patterns, as a [rows, 256 // rows] tensor of ``dtype``."""
    return torch.arange(256, dtype=torch.uint8).reshape(rows, -1).view(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_every_byte_tensorwise_and_rowwise(device, dtype) -> None:
    q = _all_bytes(dtype)
    s = torch.tensor(0.0123, dtype=torch.float32)
    got = dequantize_fp8(q.to(device), s.to(device))
    assert _same_bits(got, ref.fp8_block(q, s, None))
    rows = torch.rand(16, 1) + 0.5
    got = dequantize_fp8(q.to(device), rows.to(device), (1, q.shape[1]))
    assert _same_bits(got, ref.fp8_block(q, rows, (1, q.shape[1])))


@pytest.mark.parametrize("block", [(128, 128), (1, 128), (1, 32)])
def test_fp8_block_scales_with_partial_blocks(block) -> None:
    g = torch.Generator().manual_seed(0)
    rows, cols = (129, 132) if block[0] == 128 else (3, 200)
    q = torch.randint(0, 256, (rows, cols), dtype=torch.uint8, generator=g)
    q = q.masked_fill(q & 0x7F == 0x7F, 0).view(torch.float8_e4m3fn)  # no NaN
    grid = (-(-rows // block[0]), -(-cols // block[1]))
    if block == (1, 32):  # MXFP8: power-of-two e8m0 scales
        scale = torch.randint(110, 140, grid, dtype=torch.uint8, generator=g).view(
            torch.float8_e8m0fnu)
    else:
        scale = torch.rand(grid, generator=g) * 3 + 1e-3
    want = ref.fp8_block(q, scale, block)
    for device in DEVICES:
        assert _same_bits(dequantize_fp8(q.to(device), scale.to(device), block), want), device


@pytest.mark.parametrize("device", DEVICES)
def test_nvfp4_every_nibble_pair_with_global_scale(device) -> None:
    packed = torch.arange(256, dtype=torch.uint8).reshape(8, 32)  # 64 values per row
    g = torch.Generator().manual_seed(1)
    scale = (torch.rand(8, 4, generator=g) * 400 + 0.01).to(torch.float8_e4m3fn)
    glob = torch.tensor(0.000731, dtype=torch.float32)
    got = dequantize_fp4(packed.to(device), scale.to(device), 16, glob.to(device))
    assert _same_bits(got, ref.fp4_block(packed, scale, 16, glob.item()))


@pytest.mark.parametrize("device", DEVICES)
def test_mxfp4_per_32(device) -> None:
    packed = torch.arange(256, dtype=torch.uint8).reshape(4, 64)  # 128 values per row
    scale = torch.tensor([[120, 127, 130, 5]] * 4, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    got = dequantize_fp4(packed.to(device).view(torch.float4_e2m1fn_x2), scale.to(device), 32)
    assert _same_bits(got, ref.fp4_block(packed, scale, 32, None))


def test_e2m1_table_and_rounding() -> None:
    assert [ref.e2m1(n) for n in range(16)] == list(E2M1_VALUES)
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.24, -0.26, -5.1, 0.0])
    want = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.0, -0.5, -6.0, 0.0]
    assert unpack_fp4(pack_fp4(round_to_e2m1(x))).tolist() == want
    assert round_to_e2m1(torch.tensor([-0.24, -0.0])).tolist() == [8, 0]  # -0; +0


@pytest.mark.parametrize("shape", [(128, 4), (130, 7), (5, 3)])
def test_blocked_layout_round_trip_matches_torch(shape) -> None:
    from torch.testing._internal.common_quantized import to_blocked as torch_to_blocked

    s = torch.randint(0, 255, shape, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    blocked = to_blocked(s)
    assert torch.equal(blocked.view(torch.uint8), torch_to_blocked(s).view(torch.uint8))
    assert torch.equal(from_blocked(blocked, *shape).view(torch.uint8), s.view(torch.uint8))

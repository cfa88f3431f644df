"""FP4 E2M1 values packed two per byte: decode, encode (round to nearest, ties to even).

Element ``2i`` of a row is the low nibble of byte ``i``, element ``2i + 1`` the high
nibble (torch's ``float4_e2m1fn_x2``, ModelOpt, compressed-tensors and MXFP4 all use this
order). A nibble is sign (bit 3), exponent (bits 2-1, bias 1) and mantissa (bit 0).
"""

from __future__ import annotations

import torch

__all__ = ["E2M1_MAX", "E2M1_VALUES", "pack_fp4", "round_to_e2m1", "unpack_fp4"]

E2M1_VALUES: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                                  -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
"""The value of each of the 16 nibbles."""
E2M1_MAX = 6.0

# Midpoints between neighbouring magnitudes; a magnitude on a midpoint rounds to the
# neighbour whose mantissa bit is 0 (the even code), as IEEE round-to-nearest-even does.
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_TIE_GOES_UP = (False, True, False, True, False, True, False)


def _as_bytes(packed: torch.Tensor) -> torch.Tensor:
    if packed.dtype == torch.uint8:
        return packed
    if packed.dtype == torch.float4_e2m1fn_x2 or packed.dtype == torch.int8:
        return packed.view(torch.uint8)
    raise TypeError(f"packed FP4 data must be uint8 or float4_e2m1fn_x2, got {packed.dtype}")


def unpack_fp4(packed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The E2M1 values of ``packed`` ([..., K/2] bytes) as a [..., K] tensor of ``dtype``
    (every E2M1 value is exact in bf16, fp16 and fp32)."""
    b = _as_bytes(packed)
    codes = torch.stack([b & 0x0F, b >> 4], dim=-1).flatten(-2).long()
    table = torch.tensor(E2M1_VALUES, dtype=dtype, device=b.device)
    return table[codes]


def round_to_e2m1(x: torch.Tensor, ties: str = "even") -> torch.Tensor:
    """The nibble codes (uint8, 0-15) of ``x`` rounded to the nearest E2M1 value (ties to
    even, or with ``ties="away"`` away from zero as the MXFP4 quantizer of OpenAI's
    triton_kernels rounds; magnitudes beyond 6 saturate to 6, as FP4 has no infinity;
    negative values that round to zero give -0)."""
    if ties not in ("even", "away"):
        raise ValueError(f"ties must be 'even' or 'away', got {ties!r}")
    mag = x.abs().float()
    mids = torch.tensor(_MIDPOINTS, dtype=torch.float32, device=x.device)
    # right=False: a magnitude equal to a midpoint goes down; right=True: up
    code = torch.bucketize(mag, mids, right=ties == "away")
    if ties == "even":
        up = torch.tensor(_TIE_GOES_UP, device=x.device)
        on_mid = torch.isin(mag, mids)
        code = code + (on_mid & up[code.clamp(max=len(_MIDPOINTS) - 1)]).long()
    # a negative value keeps its sign even where it rounds to zero (-0, code 8), as
    # ModelOpt's exporter writes it; -0.0 itself encodes as +0
    sign = (x < 0).long() << 3
    return (code | sign).to(torch.uint8)


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """Nibble codes [..., K] (K even) packed two per byte: [..., K/2] uint8."""
    if codes.shape[-1] % 2:
        raise ValueError(f"FP4 packing needs an even last dimension, got {codes.shape[-1]}")
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)

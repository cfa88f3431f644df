"""Each format's dequantization rule written out element by element from its bit layout,
in float64 and plain Python, independent of flagos_quant and of torch's casts: what the
vectorized rules are checked against."""

from __future__ import annotations

import math

import torch


def e4m3fn(byte: int) -> float:
    """float8_e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; S.1111.111 is NaN,
    no infinities."""
    sign = -1.0 if byte & 0x80 else 1.0
    exp, man = (byte >> 3) & 0xF, byte & 0x7
    if exp == 0xF and man == 0x7:
        return math.nan
    if exp == 0:
        return sign * man / 8 * 2.0 ** -6
    return sign * (1 + man / 8) * 2.0 ** (exp - 7)


def e5m2(byte: int) -> float:
    """float8_e5m2: IEEE-like, 5 exponent bits (bias 15), 2 mantissa bits."""
    sign = -1.0 if byte & 0x80 else 1.0
    exp, man = (byte >> 2) & 0x1F, byte & 0x3
    if exp == 0x1F:
        return sign * math.inf if man == 0 else math.nan
    if exp == 0:
        return sign * man / 4 * 2.0 ** -14
    return sign * (1 + man / 4) * 2.0 ** (exp - 15)


def e8m0(byte: int) -> float:
    """float8_e8m0fnu (the MX scale): 2 ** (byte - 127); 0xFF is NaN."""
    return math.nan if byte == 0xFF else 2.0 ** (byte - 127)


def e2m1(nibble: int) -> float:
    """FP4 E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; no NaN or infinity."""
    sign = -1.0 if nibble & 0x8 else 1.0
    exp, man = (nibble >> 1) & 0x3, nibble & 0x1
    if exp == 0:
        return sign * man * 0.5
    return sign * (1 + man / 2) * 2.0 ** (exp - 1)


DECODERS = {torch.float8_e4m3fn: e4m3fn, torch.float8_e5m2: e5m2,
            torch.float8_e8m0fnu: e8m0}


def decode(t: torch.Tensor) -> list:
    """The values of an FP8 tensor (any shape) as nested float lists, from its bytes."""
    fn = DECODERS[t.dtype]
    raw = t.contiguous().view(torch.uint8).tolist()

    def walk(x):
        return [walk(v) for v in x] if isinstance(x, list) else fn(x)
    return walk(raw)


def round_f32(x: float) -> float:
    """x rounded once to float32 (nearest, ties to even)."""
    return torch.tensor(x, dtype=torch.float64).float().item()


def fp8_block(q: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] | None) -> torch.Tensor:
    """value[i][j] = round_f32(elem(q[i][j]) * scale[i // br][j // bc])."""
    vals = decode(q)
    s = decode(scale) if scale.dtype in DECODERS else scale.double().tolist()
    rows, cols = q.shape
    out = torch.empty(rows, cols, dtype=torch.float32)
    for i in range(rows):
        for j in range(cols):
            if block is None:
                sv = s if isinstance(s, float) else torch.tensor(s).reshape(-1)[0].item()
            else:
                sv = s[i // block[0]][j // block[1]]
            out[i, j] = round_f32(vals[i][j] * sv)
    return out


def fp4_block(packed: torch.Tensor, scale: torch.Tensor, block: int,
              global_scale: float | None) -> torch.Tensor:
    """value[i][j] = round_f32(e2m1(nibble j of row i) * scale[i][j // block] * global):
    the exact product (at most 30 significant bits, exact in float64) rounded once."""
    s = decode(scale)
    elems = _e2m1_rows(packed)
    out = torch.empty(len(elems), len(elems[0]), dtype=torch.float32)
    for i, row in enumerate(elems):
        for j, e in enumerate(row):
            v = e * s[i][j // block]
            out[i, j] = round_f32(v * global_scale if global_scale is not None else v)
    return out


def _e2m1_rows(packed: torch.Tensor) -> list[list[float]]:
    """The E2M1 values of packed [rows, cols/2] bytes, low nibble first."""
    return [[e2m1(b >> 4 * k & 0xF) for b in row for k in (0, 1)]
            for row in packed.view(torch.uint8).tolist()]


def fp4_over_global(packed: torch.Tensor, scale: torch.Tensor, block: int,
                    global_divisor: float) -> torch.Tensor:
    """compressed-tensors' NVFP4 rule: value[i][j] = round_f32(e2m1(nibble j of row i) *
    round_f32(scale[i][j // block] / global_divisor))."""
    s = decode(scale)
    elems = _e2m1_rows(packed)
    out = torch.empty(len(elems), len(elems[0]), dtype=torch.float32)
    for i, row in enumerate(elems):
        for j, e in enumerate(row):
            out[i, j] = round_f32(e * round_f32(s[i][j // block] / global_divisor))
    return out

"""The Triton kernels of :mod:`.triton_linear` (imported on its first call: importing this
module imports Triton and, under ``TRITON_INTERPRET=1``, makes interpreted kernels)."""

import triton
import triton.language as tl


@triton.jit
def fp8_kernel(x, w, s, b, y, M, N, K: tl.constexpr, sxm, sxk, swn, swk, ssn, ssk, sym, syn,
               scale_rows, scale_cols, M_BUCKET, HAS_BIAS: tl.constexpr,
               IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    # A K-tile lies inside one scale column (the launcher picks BLOCK_K dividing the
    # scale block), so each output column's scale for the tile is one value: the FP8
    # weights enter the matmul as they are (every FP8 value is exact in bf16, fp16 and
    # fp32) and their scale multiplies the tile's partial sums.
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    srow = s + (rn // scale_rows) * ssn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        xt = tl.load(x + rm[:, None] * sxm + rk[None, :] * sxk,
                     mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        wt = tl.load(w + rn[:, None] * swn + rk[None, :] * swk,
                     mask=(rn[:, None] < N) & (rk[None, :] < K), other=0.0).to(xt.dtype)
        st = tl.load(srow + (k0 // scale_cols) * ssk, mask=rn < N, other=0.0)
        if IEEE:
            part = tl.dot(xt, tl.trans(wt), input_precision="ieee")
        else:
            part = tl.dot(xt, tl.trans(wt))
        acc += part * st[None, :]
    if HAS_BIAS:
        acc += tl.load(b + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(y + rm[:, None] * sym + rn[None, :] * syn, acc.to(y.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def e2m1(code):
    # nibble -> float32 by its bits: sign bit 3 -> bit 31; exponent e = bits 2-1 (bias 1),
    # mantissa m = bit 0: 0.5 * m when e == 0, else 2^(e - 1) * (1 + m / 2)
    c = code.to(tl.int32)
    e = (c >> 1) & 3
    m = c & 1
    bits = tl.where(e == 0, m * 0x3F000000, ((e + 126) << 23) | (m << 22)) | ((c & 8) << 28)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def nvfp4_kernel(x, w, s, g, b, y, M, N, K: tl.constexpr, sxm, sxk, swn, swk, ssn, ssk, sym, syn,
                 M_BUCKET, HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # K runs over bytes: byte j of a row holds elements 2j (low nibble) and 2j + 1,
    # both under the scale of block (2j) // 16 = j // 8. Element x block scale has at
    # most 6 significant bits, exact in the activations' dtype; the global scale, one for
    # the tensor, multiplies the sums.
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for j0 in range(0, K // 2, BLOCK_K // 2):
        rj = j0 + tl.arange(0, BLOCK_K // 2)
        xmask = (rm[:, None] < M) & (rj[None, :] < K // 2)
        x_even = tl.load(x + rm[:, None] * sxm + (2 * rj)[None, :] * sxk, mask=xmask, other=0.0)
        x_odd = tl.load(x + rm[:, None] * sxm + (2 * rj + 1)[None, :] * sxk, mask=xmask,
                        other=0.0)
        wmask = (rn[:, None] < N) & (rj[None, :] < K // 2)
        byte = tl.load(w + rn[:, None] * swn + rj[None, :] * swk, mask=wmask, other=0)
        st = tl.load(s + rn[:, None] * ssn + (rj[None, :] // 8) * ssk, mask=wmask,
                     other=0.0).to(tl.float32)
        lo = (e2m1(byte & 15) * st).to(x_even.dtype)
        hi = (e2m1(byte >> 4) * st).to(x_even.dtype)
        if IEEE:
            acc += tl.dot(x_even, tl.trans(lo), input_precision="ieee")
            acc += tl.dot(x_odd, tl.trans(hi), input_precision="ieee")
        else:
            acc += tl.dot(x_even, tl.trans(lo))
            acc += tl.dot(x_odd, tl.trans(hi))
    acc = acc * tl.load(g).to(tl.float32)
    if HAS_BIAS:
        acc += tl.load(b + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(y + rm[:, None] * sym + rn[None, :] * syn, acc.to(y.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))

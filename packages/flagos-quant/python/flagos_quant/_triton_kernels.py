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


@triton.jit
def fp8_row_tile(x, w, row, rn, nmask, k0, K: tl.constexpr, sxm, sxk, swn, swk,
                 BLOCK_K: tl.constexpr):
    # K-tile k0 of activation row `row` and of weight rows rn, in float32
    rk = k0 + tl.arange(0, BLOCK_K)
    kmask = rk < K
    xt = tl.load(x + row * sxm + rk * sxk, mask=kmask, other=0.0).to(tl.float32)
    wt = tl.load(w + rn[:, None] * swn + rk[None, :] * swk,
                 mask=nmask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
    return xt, wt


@triton.jit
def fp8_gemv_kernel(x, w, s, b, y, N, K: tl.constexpr, sxm, sxk, swn, swk, ssn, ssk, sym, syn,
                    scale_rows, scale_cols, HAS_BIAS: tl.constexpr, SCALE_K: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # One activation row (decode): the weight's bytes bound the time, so no matrix units;
    # each program reduces BLOCK_N weight rows over K with float32 products kept per lane
    # and summed once at the end. SCALE_K is the scale block's width along K (0: one
    # scale per row, applied to the row's sum).
    pid_n = tl.program_id(0)
    row = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    srow = s + (rn // scale_rows) * ssn
    if SCALE_K > 0 and BLOCK_K > SCALE_K:
        # several scale blocks per K-tile: the tile is viewed as [BLOCK_N, blocks, SCALE_K]
        # and each block's sum is scaled once
        NB: tl.constexpr = BLOCK_K // SCALE_K
        acc = tl.zeros((BLOCK_N, NB), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            xt, wt = fp8_row_tile(x, w, row, rn, nmask, k0, K, sxm, sxk, swn, swk, BLOCK_K)
            part = tl.sum(tl.reshape(wt * xt[None, :], (BLOCK_N, NB, SCALE_K)), axis=2)
            rb = k0 // SCALE_K + tl.arange(0, NB)
            st = tl.load(srow[:, None] + rb[None, :] * ssk,
                         mask=nmask[:, None] & (rb[None, :] * SCALE_K < K), other=0.0)
            acc += part * st
    else:
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            xt, wt = fp8_row_tile(x, w, row, rn, nmask, k0, K, sxm, sxk, swn, swk, BLOCK_K)
            if SCALE_K > 0:  # the K-tile lies in one scale block: one scale per row
                st = tl.load(srow + (k0 // SCALE_K) * ssk, mask=nmask, other=0.0)
                acc += wt * xt[None, :] * st[:, None]
            else:
                acc += wt * xt[None, :]
    out = tl.sum(acc, axis=1)
    if SCALE_K == 0:
        out = out * tl.load(srow, mask=nmask, other=0.0)
    if HAS_BIAS:
        out += tl.load(b + rn, mask=nmask, other=0.0).to(tl.float32)
    tl.store(y + row * sym + rn * syn, out.to(y.dtype.element_ty), mask=nmask)


@triton.jit
def e2m1_times_2_14(code):
    # nibble -> float32 times 2^14, by placing its bits in a float16: sign bit 3 -> bit 15,
    # exponent and mantissa bits 2-0 -> bits 11-9. That is the float16 2^(e-15)(1 + m/2)
    # for e > 0 and m 2^-15 for e == 0 (a subnormal): E2M1's value times 2^-14 in both
    # cases, which the caller folds into the block scale.
    c = code.to(tl.int16)
    return (((c & 7) << 9) | ((c & 8) << 12)).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def nvfp4_gemv_kernel(x, w, s, g, b, y, N, K: tl.constexpr, sxm, sxk, swn, swk, ssn, ssk,
                      sym, syn, HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
    # One activation row, as fp8_gemv_kernel. A K-tile of BLOCK_K elements is BLOCK_K // 2
    # bytes in BLOCK_K // 16 scale blocks of 8 bytes: the tile is viewed as
    # [BLOCK_N, blocks, 8] so each block's sum is scaled by its E4M3 scale once.
    pid_n = tl.program_id(0)
    row = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    NB: tl.constexpr = BLOCK_K // 16
    acc = tl.zeros((BLOCK_N, NB), dtype=tl.float32)
    for j0 in range(0, K // 2, BLOCK_K // 2):
        rj = j0 + tl.arange(0, BLOCK_K // 2)
        jmask = rj < K // 2
        x_even = tl.load(x + row * sxm + (2 * rj) * sxk, mask=jmask, other=0.0).to(tl.float32)
        x_odd = tl.load(x + row * sxm + (2 * rj + 1) * sxk, mask=jmask,
                        other=0.0).to(tl.float32)
        byte = tl.load(w + rn[:, None] * swn + rj[None, :] * swk,
                       mask=nmask[:, None] & jmask[None, :], other=0)
        prod = e2m1_times_2_14(byte & 15) * x_even[None, :] + \
            e2m1_times_2_14(byte >> 4) * x_odd[None, :]
        part = tl.sum(tl.reshape(prod, (BLOCK_N, NB, 8)), axis=2)
        rb = j0 // 8 + tl.arange(0, NB)
        st = tl.load(s + rn[:, None] * ssn + rb[None, :] * ssk,
                     mask=nmask[:, None] & (rb[None, :] < K // 16), other=0.0).to(tl.float32)
        acc += part * st
    out = tl.sum(acc, axis=1) * (tl.load(g).to(tl.float32) * 16384.0)  # 2^14: see e2m1_times_2_14
    if HAS_BIAS:
        out += tl.load(b + rn, mask=nmask, other=0.0).to(tl.float32)
    tl.store(y + row * sym + rn * syn, out.to(y.dtype.element_ty), mask=nmask)

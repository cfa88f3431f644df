// simk: matrix products (mm, bmm, addmm) on strided operands.
#include <algorithm>
#include <vector>

#include "common.hpp"

namespace {

int32_t check_matmul(const simkTensor* bias, const simkTensor* a, const simkTensor* b,
                     const simkTensor* out) {
  using namespace simk;
  if (int32_t st = check_float(a, "a", -1)) return st;
  if (int32_t st = check_float(b, "b", a->dtype)) return st;
  if (int32_t st = check_float(out, "out", a->dtype)) return st;
  if (bias) {
    if (int32_t st = check_float(bias, "bias", a->dtype)) return st;
    if (bias->ndim != out->ndim) return fail(FLAGOS_NATIVE_INVALID, "bias must come broadcast to out");
  }
  int nd = a->ndim;
  if ((nd != 2 && nd != 3) || b->ndim != nd || out->ndim != nd)
    return fail(FLAGOS_NATIVE_INVALID, "matmul takes 2-D or 3-D (batched) operands");
  int r = nd - 2;
  if (a->sizes[r + 1] != b->sizes[r] || out->sizes[r] != a->sizes[r] || out->sizes[r + 1] != b->sizes[r + 1] ||
      (nd == 3 && (a->sizes[0] != b->sizes[0] || out->sizes[0] != a->sizes[0])))
    return fail(FLAGOS_NATIVE_INVALID, "matmul: shapes do not match");
  if (!contiguous(*out)) return unsupported("out is not contiguous");
  return FLAGOS_NATIVE_SUCCESS;
}

}  // namespace

extern "C" SIMK_API int32_t simkMatmulGetWorkspaceSize(const simkTensor* bias, const simkTensor* a,
                                                       const simkTensor* b, double beta,
                                                       double alpha, const simkTensor* out,
                                                       uint64_t* ws, simkExecutor** ex) {
  using namespace simk;
  if (int32_t st = check_matmul(bias, a, b, out)) return st;
  simkTensor A = *a, B = *b, O = *out, C{};
  bool has_bias = bias != nullptr && beta != 0.0;
  if (bias) C = *bias;
  float fa = float(alpha), fb = float(beta);
  int r = A.ndim - 2;
  int64_t m = A.sizes[r], k = A.sizes[r + 1], n = B.sizes[r + 1];
  // Workspace: one batch of A and B as dense float32, and an accumulator row, so that the
  // inner loop runs over contiguous floats whatever the operands' dtype and strides.
  uint64_t workspace = uint64_t(m * k + k * n + n) * sizeof(float);
  return plan([A, B, O, C, has_bias, fa, fb, r, m, k, n](void* ws) {
    int64_t batches = A.ndim == 3 ? A.sizes[0] : 1;
    int64_t sab = A.ndim == 3 ? A.strides[0] : 0, sbb = B.ndim == 3 ? B.strides[0] : 0;
    int64_t sai = A.strides[r], sak = A.strides[r + 1], sbk = B.strides[r], sbj = B.strides[r + 1];
    int64_t scb = C.ndim == 3 ? C.strides[0] : 0, sci = has_bias ? C.strides[r] : 0,
            scj = has_bias ? C.strides[r + 1] : 0;
    float* af = static_cast<float*>(ws);
    float* bf = af + m * k;
    float* row = bf + k * n;
    for (int64_t bt = 0; bt < batches; ++bt) {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p) af[i * k + p] = load(A.data, A.dtype, bt * sab + i * sai + p * sak);
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) bf[p * n + j] = load(B.data, B.dtype, bt * sbb + p * sbk + j * sbj);
      for (int64_t i = 0; i < m; ++i) {
        std::fill(row, row + n, 0.0f);
        for (int64_t p = 0; p < k; ++p) {
          const float av = af[i * k + p];
          const float* brow = bf + p * n;
          for (int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
        }
        for (int64_t j = 0; j < n; ++j) {
          float v = fa * row[j];
          if (has_bias) v += fb * load(C.data, C.dtype, bt * scb + i * sci + j * scj);
          store(O.data, O.dtype, (bt * m + i) * n + j, v);
        }
      }
    }
  }, ws, ex, workspace);
}
SIMK_DEFINE_EXECUTE(simkMatmul)

// simk: index_select (the forward of embedding) and embedding's dense backward.
#include <algorithm>
#include <vector>

#include "common.hpp"

namespace {

using namespace simk;

int32_t check_index(const simkTensor* index, const char* what) {
  if (!index || (index->dtype != FLAGOS_NATIVE_INT64 && index->dtype != FLAGOS_NATIVE_INT32))
    return unsupported(std::string(what) + " must be int64 or int32");
  if (index->ndim > FLAGOS_NATIVE_MAX_DIMS) return unsupported(std::string(what) + " has too many dims");
  return FLAGOS_NATIVE_SUCCESS;
}

inline int64_t index_at(const simkTensor& t, int64_t i) {
  int64_t off = offset_of(t, i);
  return t.dtype == FLAGOS_NATIVE_INT64 ? static_cast<const int64_t*>(t.data)[off]
                                        : static_cast<const int32_t*>(t.data)[off];
}

}  // namespace

// Indices out of range leave their output rows zero: a kernel cannot raise on the host
// (the caller validated nothing, as on a real device, where this would be a device fault).
extern "C" SIMK_API int32_t simkIndexSelectGetWorkspaceSize(const simkTensor* self, int64_t dim,
                                                            const simkTensor* index,
                                                            const simkTensor* out, uint64_t* ws,
                                                            simkExecutor** ex) {
  if (int32_t st = check_float(self, "self", -1)) return st;
  if (int32_t st = check_float(out, "out", self->dtype)) return st;
  if (int32_t st = check_index(index, "index")) return st;
  if (!contiguous(*self) || !contiguous(*out)) return unsupported("index_select takes contiguous tensors");
  int nd = std::max(self->ndim, 1);
  if (dim < 0 || dim >= nd) return fail(FLAGOS_NATIVE_INVALID, "dim out of range");
  int64_t outer = 1, len = self->ndim ? self->sizes[dim] : 1, inner = 1;
  for (int d = 0; d < self->ndim; ++d) {
    if (d < dim) outer *= self->sizes[d];
    else if (d > dim) inner *= self->sizes[d];
  }
  int64_t count = numel(*index);
  if (numel(*out) != outer * count * inner) return fail(FLAGOS_NATIVE_INVALID, "out has the wrong size");
  simkTensor a = *self, idx = *index, o = *out;
  return plan([=](void*) {
    for (int64_t p = 0; p < outer; ++p) {
      for (int64_t j = 0; j < count; ++j) {
        int64_t k = index_at(idx, j);
        if (k < 0) k += len;
        bool ok = k >= 0 && k < len;
        for (int64_t q = 0; q < inner; ++q) {
          float v = ok ? load(a.data, a.dtype, (p * len + k) * inner + q) : 0.0f;
          store(o.data, o.dtype, (p * count + j) * inner + q, v);
        }
      }
    }
  }, ws, ex);
}
SIMK_DEFINE_EXECUTE(simkIndexSelect)

extern "C" SIMK_API int32_t simkEmbeddingBackwardGetWorkspaceSize(const simkTensor* grad,
                                                                  const simkTensor* indices,
                                                                  int64_t padding_idx,
                                                                  const simkTensor* grad_weight,
                                                                  uint64_t* ws, simkExecutor** ex) {
  if (int32_t st = check_float(grad, "grad", -1)) return st;
  if (int32_t st = check_float(grad_weight, "grad_weight", grad->dtype)) return st;
  if (int32_t st = check_index(indices, "indices")) return st;
  if (!contiguous(*grad) || !contiguous(*grad_weight) || grad_weight->ndim != 2)
    return unsupported("embedding backward takes a contiguous grad and a 2-D grad_weight");
  int64_t rows = numel(*indices), dim = grad_weight->sizes[1], num = grad_weight->sizes[0];
  if (numel(*grad) != rows * dim) return fail(FLAGOS_NATIVE_INVALID, "grad has the wrong size");
  simkTensor g = *grad, idx = *indices, o = *grad_weight;
  // Workspace: float accumulators, so reduced-precision gradients round once.
  return plan([=](void* workspace) {
    auto* acc = static_cast<float*>(workspace);
    std::fill(acc, acc + num * dim, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t k = index_at(idx, r);
      if (k == padding_idx || k < 0 || k >= num) continue;
      for (int64_t q = 0; q < dim; ++q) acc[k * dim + q] += load(g.data, g.dtype, r * dim + q);
    }
    for (int64_t i = 0; i < num * dim; ++i) store(o.data, o.dtype, i, acc[i]);
  }, ws, ex, uint64_t(std::max<int64_t>(num * dim, 1)) * sizeof(float));
}
SIMK_DEFINE_EXECUTE(simkEmbeddingBackward)

// simk: reductions (sum, mean) and the softmax family, forward and backward.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common.hpp"

namespace simk {
namespace {

// Sum (or mean) of `self` over the dims flagged in `reduce`; the workspace holds one
// double accumulator per output element.
int32_t plan_reduce(const simkTensor* self, const int64_t* dims, int32_t ndims, bool keepdim,
                    const simkTensor* out, uint64_t* ws, simkExecutor** ex, bool mean) {
  (void)keepdim;  // out has the kept shape either way; only its element count matters
  // Sums serve int32 and int64 too (an integer mean is an error in torch).
  if (int32_t st = check_numeric(self, "self", -1, !mean)) return st;
  if (int32_t st = check_numeric(out, "out", self->dtype, !mean)) return st;
  if (!contiguous(*out)) return unsupported("out is not contiguous");
  bool reduce[FLAGOS_NATIVE_MAX_DIMS] = {};
  for (int32_t i = 0; i < ndims; ++i) {
    if (dims[i] < 0 || dims[i] >= std::max<int64_t>(self->ndim, 1))
      return fail(FLAGOS_NATIVE_INVALID, "reduction dim out of range");
    if (self->ndim) reduce[dims[i]] = true;
  }
  if (ndims == 0) std::fill(reduce, reduce + FLAGOS_NATIVE_MAX_DIMS, true);
  int64_t kept = 1, count = 1;
  for (int d = 0; d < self->ndim; ++d) (reduce[d] ? count : kept) *= self->sizes[d];
  if (numel(*out) != kept) return fail(FLAGOS_NATIVE_INVALID, "out has the wrong number of elements");
  simkTensor a = *self, o = *out;
  // Output strides over the input's dims (0 on reduced dims), for the accumulation.
  simkTensor acc_index = a;
  int64_t stride = 1;
  for (int d = a.ndim - 1; d >= 0; --d) {
    acc_index.strides[d] = reduce[d] ? 0 : stride;
    if (!reduce[d]) stride *= a.sizes[d];
  }
  uint64_t acc_bytes = uint64_t(std::max<int64_t>(kept, 1)) * sizeof(double);
  if (compute_of(a.dtype) == Compute::INT) {  // exact: an int64 accumulator (wrapping as torch)
    return plan([a, o, acc_index, kept](void* workspace) {
      auto* acc = static_cast<int64_t*>(workspace);
      std::fill(acc, acc + kept, int64_t(0));
      int64_t n = numel(a);
      for (int64_t i = 0; i < n; ++i)
        acc[offset_of(acc_index, i)] += load_as<int64_t>(a.data, a.dtype, offset_of(a, i));
      for (int64_t j = 0; j < kept; ++j) store_as<int64_t>(o.data, o.dtype, j, acc[j]);
    }, ws, ex, acc_bytes);
  }
  return plan([a, o, acc_index, kept, count, mean](void* workspace) {
    auto* acc = static_cast<double*>(workspace);
    std::fill(acc, acc + kept, 0.0);
    int64_t n = numel(a);
    for (int64_t i = 0; i < n; ++i) acc[offset_of(acc_index, i)] += load_as<double>(a.data, a.dtype, offset_of(a, i));
    for (int64_t j = 0; j < kept; ++j) {
      double v = mean ? (count ? acc[j] / double(count) : NAN) : acc[j];
      store_as<double>(o.data, o.dtype, j, v);
    }
  }, ws, ex, acc_bytes);
}

// Rows of a softmax over `dim` of a contiguous tensor: (outer, inner) pairs, stride inner.
struct Rows {
  int64_t outer = 1, len = 1, inner = 1;
};
int32_t softmax_rows(const simkTensor* self, int64_t dim, const simkTensor* out, Rows* r) {
  if (int32_t st = check_float(self, "self", -1)) return st;
  if (int32_t st = check_float(out, "out", -1)) return st;
  if (!contiguous(*self) || !contiguous(*out)) return unsupported("softmax takes contiguous tensors");
  if (numel(*self) != numel(*out)) return fail(FLAGOS_NATIVE_INVALID, "out and self differ in size");
  int nd = std::max(self->ndim, 1);
  if (dim < 0 || dim >= nd) return fail(FLAGOS_NATIVE_INVALID, "softmax dim out of range");
  for (int d = 0; d < self->ndim; ++d) {
    if (d < dim) r->outer *= self->sizes[d];
    else if (d == dim) r->len = self->sizes[d];
    else r->inner *= self->sizes[d];
  }
  return FLAGOS_NATIVE_SUCCESS;
}

int32_t plan_softmax(const simkTensor* self, int64_t dim, const simkTensor* out, uint64_t* ws,
                     simkExecutor** ex, bool log) {
  Rows r;
  if (int32_t st = softmax_rows(self, dim, out, &r)) return st;
  simkTensor a = *self, o = *out;
  return plan([a, o, r, log](void*) {
    for (int64_t p = 0; p < r.outer; ++p) {
      for (int64_t q = 0; q < r.inner; ++q) {
        int64_t base = p * r.len * r.inner + q;
        float mx = -INFINITY;
        for (int64_t i = 0; i < r.len; ++i) mx = std::max(mx, load(a.data, a.dtype, base + i * r.inner));
        double sum = 0;
        for (int64_t i = 0; i < r.len; ++i) sum += std::exp(double(load(a.data, a.dtype, base + i * r.inner)) - mx);
        for (int64_t i = 0; i < r.len; ++i) {
          double x = double(load(a.data, a.dtype, base + i * r.inner)) - mx;
          store(o.data, o.dtype, base + i * r.inner, float(log ? x - std::log(sum) : std::exp(x) / sum));
        }
      }
    }
  }, ws, ex);
}

int32_t plan_softmax_backward(const simkTensor* grad, const simkTensor* output, int64_t dim,
                              const simkTensor* grad_input, uint64_t* ws, simkExecutor** ex,
                              bool log) {
  Rows r;
  if (int32_t st = softmax_rows(output, dim, grad_input, &r)) return st;
  if (int32_t st = check_float(grad, "grad_output", output->dtype)) return st;
  if (!contiguous(*grad) || numel(*grad) != numel(*output)) return unsupported("grad_output is not contiguous");
  simkTensor g = *grad, y = *output, o = *grad_input;
  return plan([g, y, o, r, log](void*) {
    for (int64_t p = 0; p < r.outer; ++p) {
      for (int64_t q = 0; q < r.inner; ++q) {
        int64_t base = p * r.len * r.inner + q;
        double dot = 0;
        for (int64_t i = 0; i < r.len; ++i) {
          int64_t k = base + i * r.inner;
          float gv = load(g.data, g.dtype, k);
          dot += log ? gv : double(gv) * load(y.data, y.dtype, k);
        }
        for (int64_t i = 0; i < r.len; ++i) {
          int64_t k = base + i * r.inner;
          double gv = load(g.data, g.dtype, k), yv = load(y.data, y.dtype, k);
          store(o.data, o.dtype, k, float(log ? gv - std::exp(yv) * dot : yv * (gv - dot)));
        }
      }
    }
  }, ws, ex);
}

}  // namespace
}  // namespace simk

extern "C" SIMK_API int32_t simkSumGetWorkspaceSize(const simkTensor* self, const int64_t* dims,
                                                    int32_t ndims, bool keepdim,
                                                    const simkTensor* out, uint64_t* ws,
                                                    simkExecutor** ex) {
  return simk::plan_reduce(self, dims, ndims, keepdim, out, ws, ex, false);
}
SIMK_DEFINE_EXECUTE(simkSum)
extern "C" SIMK_API int32_t simkMeanGetWorkspaceSize(const simkTensor* self, const int64_t* dims,
                                                     int32_t ndims, bool keepdim,
                                                     const simkTensor* out, uint64_t* ws,
                                                     simkExecutor** ex) {
  return simk::plan_reduce(self, dims, ndims, keepdim, out, ws, ex, true);
}
SIMK_DEFINE_EXECUTE(simkMean)

extern "C" SIMK_API int32_t simkSoftmaxGetWorkspaceSize(const simkTensor* self, int64_t dim,
                                                        const simkTensor* out, uint64_t* ws,
                                                        simkExecutor** ex) {
  return simk::plan_softmax(self, dim, out, ws, ex, false);
}
SIMK_DEFINE_EXECUTE(simkSoftmax)
extern "C" SIMK_API int32_t simkLogSoftmaxGetWorkspaceSize(const simkTensor* self, int64_t dim,
                                                           const simkTensor* out, uint64_t* ws,
                                                           simkExecutor** ex) {
  return simk::plan_softmax(self, dim, out, ws, ex, true);
}
SIMK_DEFINE_EXECUTE(simkLogSoftmax)
extern "C" SIMK_API int32_t simkSoftmaxBackwardGetWorkspaceSize(
    const simkTensor* grad, const simkTensor* output, int64_t dim, const simkTensor* grad_input,
    uint64_t* ws, simkExecutor** ex) {
  return simk::plan_softmax_backward(grad, output, dim, grad_input, ws, ex, false);
}
SIMK_DEFINE_EXECUTE(simkSoftmaxBackward)
extern "C" SIMK_API int32_t simkLogSoftmaxBackwardGetWorkspaceSize(
    const simkTensor* grad, const simkTensor* output, int64_t dim, const simkTensor* grad_input,
    uint64_t* ws, simkExecutor** ex) {
  return simk::plan_softmax_backward(grad, output, dim, grad_input, ws, ex, true);
}
SIMK_DEFINE_EXECUTE(simkLogSoftmaxBackward)

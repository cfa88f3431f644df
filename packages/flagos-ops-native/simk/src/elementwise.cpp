// simk: elementwise kernels (unary, binary with broadcasting, activation gradients).
#include <algorithm>

#include "common.hpp"

namespace simk {
namespace {

// Inputs have the output's shape (broadcast dimensions have stride 0); the output may be
// strided (dense, as structured kernels lay it out like the inputs).
template <class F>
int32_t plan_unary(const simkTensor* self, const simkTensor* out, uint64_t* ws,
                   simkExecutor** ex, F f) {
  if (int32_t st = check_float(self, "self", -1)) return st;
  if (int32_t st = check_float(out, "out", self->dtype)) return st;
  if (out->ndim != self->ndim || !std::equal(out->sizes, out->sizes + out->ndim, self->sizes))
    return fail(FLAGOS_NATIVE_INVALID, "out and self differ in shape");
  simkTensor a = *self, o = *out;
  return plan([a, o, f](void*) {
    int64_t n = numel(o);
    bool da = contiguous(a), dout = contiguous(o);
    for (int64_t i = 0; i < n; ++i) {
      float x = load(a.data, a.dtype, da ? i : offset_of(a, i));
      store(o.data, o.dtype, dout ? i : offset_of(o, i), f(x));
    }
  }, ws, ex);
}

template <class F>
int32_t plan_binary(const simkTensor* self, const simkTensor* other, double scalar,
                    const simkTensor* out, uint64_t* ws, simkExecutor** ex, F f) {
  if (int32_t st = check_float(self, "self", -1)) return st;
  if (int32_t st = check_float(other, "other", self->dtype)) return st;
  if (int32_t st = check_float(out, "out", self->dtype)) return st;
  for (const simkTensor* t : {self, other}) {
    if (t->ndim != out->ndim || !std::equal(out->sizes, out->sizes + out->ndim, t->sizes))
      return fail(FLAGOS_NATIVE_INVALID, "inputs must come broadcast to out's shape");
  }
  simkTensor a = *self, b = *other, o = *out;
  float s = float(scalar);
  return plan([a, b, o, s, f](void*) {
    int64_t n = numel(o);
    bool da = contiguous(a), db = contiguous(b), dout = contiguous(o);
    for (int64_t i = 0; i < n; ++i) {
      float x = load(a.data, a.dtype, da ? i : offset_of(a, i));
      float y = load(b.data, b.dtype, db ? i : offset_of(b, i));
      store(o.data, o.dtype, dout ? i : offset_of(o, i), f(x, y, s));
    }
  }, ws, ex);
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace
}  // namespace simk

#define SIMK_UNARY_OP(name, expr)                                                          \
  extern "C" SIMK_API int32_t name##GetWorkspaceSize(const simkTensor* self,               \
                                                     const simkTensor* out, uint64_t* ws, \
                                                     simkExecutor** ex) {                  \
    return simk::plan_unary(self, out, ws, ex, [](float x) { return (expr); });            \
  }                                                                                        \
  SIMK_DEFINE_EXECUTE(name)

#define SIMK_BINARY_OP(name, expr)                                                         \
  extern "C" SIMK_API int32_t name##GetWorkspaceSize(const simkTensor* self,               \
                                                     const simkTensor* other, double scalar, \
                                                     const simkTensor* out, uint64_t* ws, \
                                                     simkExecutor** ex) {                  \
    return simk::plan_binary(self, other, scalar, out, ws, ex,                             \
                             [](float x, float y, float s) { (void)s; return (expr); });   \
  }                                                                                        \
  SIMK_DEFINE_EXECUTE(name)

SIMK_UNARY_OP(simkNeg, -x)
SIMK_UNARY_OP(simkExp, std::exp(x))
SIMK_UNARY_OP(simkLog, std::log(x))
SIMK_UNARY_OP(simkSqrt, std::sqrt(x))
SIMK_UNARY_OP(simkRsqrt, 1.0f / std::sqrt(x))
SIMK_UNARY_OP(simkSin, std::sin(x))
SIMK_UNARY_OP(simkCos, std::cos(x))
SIMK_UNARY_OP(simkTanh, std::tanh(x))
SIMK_UNARY_OP(simkSigmoid, simk::sigmoid(x))
SIMK_UNARY_OP(simkRelu, std::isnan(x) ? x : (x > 0.0f ? x : 0.0f))
SIMK_UNARY_OP(simkSilu, x * simk::sigmoid(x))
SIMK_UNARY_OP(simkAbs, std::fabs(x))
SIMK_UNARY_OP(simkReciprocal, 1.0f / x)

SIMK_BINARY_OP(simkAdd, x + s * y)
SIMK_BINARY_OP(simkSub, x - s * y)
SIMK_BINARY_OP(simkMul, x * y)
SIMK_BINARY_OP(simkDiv, x / y)
SIMK_BINARY_OP(simkMaximum, (std::isnan(x) || std::isnan(y)) ? NAN : std::max(x, y))
SIMK_BINARY_OP(simkMinimum, (std::isnan(x) || std::isnan(y)) ? NAN : std::min(x, y))
// silu'(x) = sig(x) * (1 + x * (1 - sig(x)))
SIMK_BINARY_OP(simkSiluBackward, x * simk::sigmoid(y) * (1.0f + y * (1.0f - simk::sigmoid(y))))
SIMK_BINARY_OP(simkSigmoidBackward, x * (1.0f - y) * y)
SIMK_BINARY_OP(simkTanhBackward, x * (1.0f - y * y))
SIMK_BINARY_OP(simkThresholdBackward, y <= s ? 0.0f : x)

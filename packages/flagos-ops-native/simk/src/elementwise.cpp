// simk: elementwise kernels (unary, binary with broadcasting, activation gradients).
#include <algorithm>

#include "common.hpp"

namespace simk {
namespace {

// Inputs have the output's shape (broadcast dimensions have stride 0); the output may be
// strided (dense, as structured kernels lay it out like the inputs).
// `f` is generic: it runs in the dtype's compute type (compute_of). `ints`: the op is
// defined on integers with an integer result (neg, abs, add, ...), so int32 and int64
// are served; float64 always is.
template <class T, class F>
void run_unary(const simkTensor& a, const simkTensor& o, F f) {
  int64_t n = numel(o);
  bool da = contiguous(a), dout = contiguous(o);
  for (int64_t i = 0; i < n; ++i) {
    T x = load_as<T>(a.data, a.dtype, da ? i : offset_of(a, i));
    store_as<T>(o.data, o.dtype, dout ? i : offset_of(o, i), T(f(x)));
  }
}

template <class F>
int32_t plan_unary(const simkTensor* self, const simkTensor* out, uint64_t* ws,
                   simkExecutor** ex, bool ints, F f) {
  if (int32_t st = check_numeric(self, "self", -1, ints)) return st;
  if (int32_t st = check_numeric(out, "out", self->dtype, ints)) return st;
  if (out->ndim != self->ndim || !std::equal(out->sizes, out->sizes + out->ndim, self->sizes))
    return fail(FLAGOS_NATIVE_INVALID, "out and self differ in shape");
  simkTensor a = *self, o = *out;
  switch (compute_of(a.dtype)) {
    case Compute::DOUBLE: return plan([a, o, f](void*) { run_unary<double>(a, o, f); }, ws, ex);
    case Compute::INT: return plan([a, o, f](void*) { run_unary<int64_t>(a, o, f); }, ws, ex);
    default: return plan([a, o, f](void*) { run_unary<float>(a, o, f); }, ws, ex);
  }
}

template <class T, class F>
void run_binary(const simkTensor& a, const simkTensor& b, const simkTensor& o, T s, F f) {
  int64_t n = numel(o);
  bool da = contiguous(a), db = contiguous(b), dout = contiguous(o);
  for (int64_t i = 0; i < n; ++i) {
    T x = load_as<T>(a.data, a.dtype, da ? i : offset_of(a, i));
    T y = load_as<T>(b.data, b.dtype, db ? i : offset_of(b, i));
    store_as<T>(o.data, o.dtype, dout ? i : offset_of(o, i), T(f(x, y, s)));
  }
}

template <class F>
int32_t plan_binary(const simkTensor* self, const simkTensor* other, double scalar,
                    const simkTensor* out, uint64_t* ws, simkExecutor** ex, bool ints, F f) {
  if (int32_t st = check_numeric(self, "self", -1, ints)) return st;
  if (int32_t st = check_numeric(other, "other", self->dtype, ints)) return st;
  if (int32_t st = check_numeric(out, "out", self->dtype, ints)) return st;
  for (const simkTensor* t : {self, other}) {
    if (t->ndim != out->ndim || !std::equal(out->sizes, out->sizes + out->ndim, t->sizes))
      return fail(FLAGOS_NATIVE_INVALID, "inputs must come broadcast to out's shape");
  }
  simkTensor a = *self, b = *other, o = *out;
  switch (compute_of(a.dtype)) {
    case Compute::DOUBLE:
      return plan([=](void*) { run_binary<double>(a, b, o, scalar, f); }, ws, ex);
    case Compute::INT:
      if (scalar != double(int64_t(scalar))) return unsupported("a fractional scalar for integers");
      return plan([=](void*) { run_binary<int64_t>(a, b, o, int64_t(scalar), f); }, ws, ex);
    default:
      return plan([=](void*) { run_binary<float>(a, b, o, float(scalar), f); }, ws, ex);
  }
}

template <class T>
T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }
template <class T>
bool isnan_(T x) { return x != x; }

}  // namespace
}  // namespace simk

#define SIMK_UNARY_OP(name, ints, expr)                                                    \
  extern "C" SIMK_API int32_t name##GetWorkspaceSize(const simkTensor* self,               \
                                                     const simkTensor* out, uint64_t* ws, \
                                                     simkExecutor** ex) {                  \
    return simk::plan_unary(self, out, ws, ex, ints, [](auto x) {                          \
      using T = decltype(x);                                                               \
      (void)sizeof(T);                                                                     \
      return (expr);                                                                       \
    });                                                                                    \
  }                                                                                        \
  SIMK_DEFINE_EXECUTE(name)

#define SIMK_BINARY_OP(name, ints, expr)                                                   \
  extern "C" SIMK_API int32_t name##GetWorkspaceSize(const simkTensor* self,               \
                                                     const simkTensor* other, double scalar, \
                                                     const simkTensor* out, uint64_t* ws, \
                                                     simkExecutor** ex) {                  \
    return simk::plan_binary(self, other, scalar, out, ws, ex, ints, [](auto x, auto y, auto s) { \
      using T = decltype(x);                                                               \
      (void)s;                                                                             \
      (void)sizeof(T);                                                                     \
      return (expr);                                                                       \
    });                                                                                    \
  }                                                                                        \
  SIMK_DEFINE_EXECUTE(name)

// Integer-valued ops (true for `ints`) serve int32 and int64; the rest only floats.
SIMK_UNARY_OP(simkNeg, true, -x)
SIMK_UNARY_OP(simkExp, false, std::exp(x))
SIMK_UNARY_OP(simkLog, false, std::log(x))
SIMK_UNARY_OP(simkSqrt, false, std::sqrt(x))
SIMK_UNARY_OP(simkRsqrt, false, T(1) / std::sqrt(x))
SIMK_UNARY_OP(simkSin, false, std::sin(x))
SIMK_UNARY_OP(simkCos, false, std::cos(x))
SIMK_UNARY_OP(simkTanh, false, std::tanh(x))
SIMK_UNARY_OP(simkSigmoid, false, simk::sigmoid(x))
SIMK_UNARY_OP(simkRelu, true, simk::isnan_(x) ? x : (x > T(0) ? x : T(0)))
SIMK_UNARY_OP(simkSilu, false, x * simk::sigmoid(x))
SIMK_UNARY_OP(simkAbs, true, x < T(0) ? T(-x) : x)
SIMK_UNARY_OP(simkReciprocal, false, T(1) / x)

SIMK_BINARY_OP(simkAdd, true, x + s * y)
SIMK_BINARY_OP(simkSub, true, x - s * y)
SIMK_BINARY_OP(simkMul, true, x * y)
SIMK_BINARY_OP(simkDiv, false, x / y)
SIMK_BINARY_OP(simkMaximum, true, (simk::isnan_(x) || simk::isnan_(y)) ? T(NAN) : std::max(x, y))
SIMK_BINARY_OP(simkMinimum, true, (simk::isnan_(x) || simk::isnan_(y)) ? T(NAN) : std::min(x, y))
// silu'(x) = sig(x) * (1 + x * (1 - sig(x)))
SIMK_BINARY_OP(simkSiluBackward, false, x * simk::sigmoid(y) * (T(1) + y * (T(1) - simk::sigmoid(y))))
SIMK_BINARY_OP(simkSigmoidBackward, false, x * (T(1) - y) * y)
SIMK_BINARY_OP(simkTanhBackward, false, x * (T(1) - y * y))
SIMK_BINARY_OP(simkThresholdBackward, false, y <= s ? T(0) : x)

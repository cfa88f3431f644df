// simk internals: element types, strided addressing, the executor and its launch on a
// sim stream. Nothing here is exported.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

#include "flagos_hal/sim_runtime.h"
#include "simk.h"

namespace simk {

// ---- errors --------------------------------------------------------------------------
// Records `message` as this thread's last error and returns `status`.
int32_t fail(int32_t status, const std::string& message);
inline int32_t unsupported(const std::string& why) { return fail(FLAGOS_NATIVE_UNSUPPORTED, why); }

// ---- element types -------------------------------------------------------------------
inline float bf16_to_float(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return uint16_t(bits >> 16);
}
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

inline float load(const void* base, int32_t dtype, int64_t i) {
  switch (dtype) {
    case FLAGOS_NATIVE_FLOAT32: return static_cast<const float*>(base)[i];
    case FLAGOS_NATIVE_BFLOAT16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    default: return half_to_float(static_cast<const uint16_t*>(base)[i]);
  }
}
inline void store(void* base, int32_t dtype, int64_t i, float v) {
  switch (dtype) {
    case FLAGOS_NATIVE_FLOAT32: static_cast<float*>(base)[i] = v; break;
    case FLAGOS_NATIVE_BFLOAT16: static_cast<uint16_t*>(base)[i] = float_to_bf16(v); break;
    default: static_cast<uint16_t*>(base)[i] = float_to_half(v); break;
  }
}
// The types elementwise kernels compute in: float for float32 and the 16-bit floats,
// double for float64, int64_t for the integers.
enum class Compute { FLOAT, DOUBLE, INT };
inline Compute compute_of(int32_t dtype) {
  if (dtype == FLAGOS_NATIVE_FLOAT64) return Compute::DOUBLE;
  if (dtype == FLAGOS_NATIVE_INT32 || dtype == FLAGOS_NATIVE_INT64) return Compute::INT;
  return Compute::FLOAT;
}
template <class T>
inline T load_as(const void* base, int32_t dtype, int64_t i) {
  // The float compute type only ever sees the float dtypes: load() directly, no second
  // dispatch per element.
  if constexpr (std::is_same_v<T, float>) return load(base, dtype, i);
  switch (dtype) {
    case FLAGOS_NATIVE_FLOAT64: return T(static_cast<const double*>(base)[i]);
    case FLAGOS_NATIVE_INT64: return T(static_cast<const int64_t*>(base)[i]);
    case FLAGOS_NATIVE_INT32: return T(static_cast<const int32_t*>(base)[i]);
    default: return T(load(base, dtype, i));
  }
}
template <class T>
inline void store_as(void* base, int32_t dtype, int64_t i, T v) {
  if constexpr (std::is_same_v<T, float>) {
    store(base, dtype, i, v);
    return;
  }
  switch (dtype) {
    case FLAGOS_NATIVE_FLOAT64: static_cast<double*>(base)[i] = double(v); break;
    case FLAGOS_NATIVE_INT64: static_cast<int64_t*>(base)[i] = int64_t(v); break;
    case FLAGOS_NATIVE_INT32: static_cast<int32_t*>(base)[i] = int32_t(v); break;
    default: store(base, dtype, i, float(v)); break;
  }
}
inline bool is_float(int32_t dtype) {
  return dtype == FLAGOS_NATIVE_FLOAT32 || dtype == FLAGOS_NATIVE_FLOAT16 ||
         dtype == FLAGOS_NATIVE_BFLOAT16;
}

// ---- shapes --------------------------------------------------------------------------
inline int64_t numel(const simkTensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= t.sizes[d];
  return n;
}
inline bool contiguous(const simkTensor& t) {
  int64_t expect = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.sizes[d] != 1 && t.strides[d] != expect) return false;
    expect *= t.sizes[d];
  }
  return true;
}
// Element offset of the `linear`-th element (row-major over t's sizes).
inline int64_t offset_of(const simkTensor& t, int64_t linear) {
  int64_t off = 0;
  for (int d = t.ndim - 1; d >= 0; --d) {
    int64_t s = t.sizes[d];
    off += (linear % s) * t.strides[d];
    linear /= s;
  }
  return off;
}
// Checks a float tensor descriptor of at most FLAGOS_NATIVE_MAX_DIMS dims.
int32_t check_float(const simkTensor* t, const char* what, int32_t dtype);
// The same for the elementwise and reduction kernels' dtypes: the floats, float64 and,
// with `ints`, int32 and int64.
int32_t check_numeric(const simkTensor* t, const char* what, int32_t dtype, bool ints);

// ---- execution -----------------------------------------------------------------------
// A planned call: the kernel, with copies of everything it reads.
struct Executor {
  std::function<void(void* workspace)> run;
};
// Phase 1's result: a new executor running `run`, no workspace unless asked.
int32_t plan(std::function<void(void*)> run, uint64_t* workspace_size, simkExecutor** executor,
             uint64_t workspace = 0);
// Phase 2 of every op: queue the executor's kernel on the sim stream `stream`.
int32_t execute(void* workspace, uint64_t workspace_size, simkExecutor* executor, void* stream);

}  // namespace simk

#define SIMK_DEFINE_EXECUTE(name)                                                        \
  extern "C" SIMK_API int32_t name(void* workspace, uint64_t workspace_size,              \
                                   simkExecutor* executor, void* stream) {               \
    return simk::execute(workspace, workspace_size, executor, stream);                    \
  }

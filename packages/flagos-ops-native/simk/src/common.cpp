// simk: errors, half precision, executors and their launch on the sim stream.
#include "common.hpp"

#include <cstddef>
#include <memory>

namespace simk {
namespace {
thread_local std::string g_last_error;
}

int32_t fail(int32_t status, const std::string& message) {
  g_last_error = message;
  return status;
}

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while (!(man & 0x400u)) { man <<= 1; --exp; }
      bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);            // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);           // overflow -> inf
  if (abs < 0x38800000u) {                                           // subnormal or zero
    if (abs < 0x33000000u) return uint16_t(sign);
    // value = m * 2^(e - 150); in units of the smallest half subnormal (2^-24): m >> shift.
    uint32_t e = abs >> 23, m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = ((abs - 0x38000000u) >> 13);
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return uint16_t(sign | r);
}

int32_t check_float(const simkTensor* t, const char* what, int32_t dtype) {
  if (!t || (!t->data && numel(*t) != 0)) return fail(FLAGOS_NATIVE_INVALID, std::string(what) + " is NULL");
  if (t->ndim < 0 || t->ndim > FLAGOS_NATIVE_MAX_DIMS)
    return unsupported(std::string(what) + " has " + std::to_string(t->ndim) + " dimensions");
  if (!is_float(t->dtype)) return unsupported(std::string(what) + " is not a float tensor");
  if (dtype >= 0 && t->dtype != dtype) return unsupported(std::string(what) + " has another dtype");
  return FLAGOS_NATIVE_SUCCESS;
}

int32_t check_numeric(const simkTensor* t, const char* what, int32_t dtype, bool ints) {
  if (t && (t->dtype == FLAGOS_NATIVE_FLOAT64 ||
            (ints && (t->dtype == FLAGOS_NATIVE_INT32 || t->dtype == FLAGOS_NATIVE_INT64)))) {
    if (!t->data && numel(*t) != 0) return fail(FLAGOS_NATIVE_INVALID, std::string(what) + " is NULL");
    if (t->ndim < 0 || t->ndim > FLAGOS_NATIVE_MAX_DIMS)
      return unsupported(std::string(what) + " has " + std::to_string(t->ndim) + " dimensions");
    if (dtype >= 0 && t->dtype != dtype) return unsupported(std::string(what) + " has another dtype");
    return FLAGOS_NATIVE_SUCCESS;
  }
  if (t && !is_float(t->dtype))
    return unsupported(std::string(what) + (ints ? " has a dtype simk lacks" : " is not a floating-point tensor"));
  return check_float(t, what, dtype);
}

int32_t plan(std::function<void(void*)> run, uint64_t* workspace_size, simkExecutor** executor,
             uint64_t workspace) {
  if (!workspace_size || !executor) return fail(FLAGOS_NATIVE_INVALID, "workspace_size or executor is NULL");
  auto* ex = new Executor{std::move(run)};
  *workspace_size = workspace;
  *executor = reinterpret_cast<simkExecutor*>(ex);
  return FLAGOS_NATIVE_SUCCESS;
}

namespace {
struct Launch {
  std::unique_ptr<Executor> executor;
  void* workspace;
};
void run_launch(void* data) {
  std::unique_ptr<Launch> launch(static_cast<Launch*>(data));
  launch->executor->run(launch->workspace);
}
// With launch_host_task the launch may run again at each replay of a stream capture: it
// is freed by release_launch, not after a run.
void rerun_launch(void* data) {
  auto* launch = static_cast<Launch*>(data);
  launch->executor->run(launch->workspace);
}
void release_launch(void* data) { delete static_cast<Launch*>(data); }

bool has_host_tasks(const flagos_hal_sim_stream_t* s) {
  return s->struct_size >= offsetof(flagos_hal_sim_stream_t, launch_host_task) +
                               sizeof(s->launch_host_task) && s->launch_host_task;
}
}  // namespace

int32_t execute(void* workspace, uint64_t workspace_size, simkExecutor* executor, void* stream) {
  (void)workspace_size;  // the planned size: the kernel knows its own
  std::unique_ptr<Executor> ex(reinterpret_cast<Executor*>(executor));
  if (!ex) return fail(FLAGOS_NATIVE_INVALID, "executor is NULL");
  auto* s = static_cast<const flagos_hal_sim_stream_t*>(stream);
  if (!s || s->struct_size < sizeof(flagos_hal_sim_stream_t) || !s->launch_host_func)
    return fail(FLAGOS_NATIVE_INVALID, "stream is not a sim runtime stream (flagos_hal/sim_runtime.h)");
  auto* launch = new Launch{std::move(ex), workspace};
  if (has_host_tasks(s)) {  // releases `launch` itself, also when it refuses
    if (s->launch_host_task(s, &rerun_launch, launch, &release_launch) != FLAGOS_SUCCESS)
      return fail(FLAGOS_NATIVE_FAILED, "the sim stream refused the kernel (destroyed stream?)");
    return FLAGOS_NATIVE_SUCCESS;
  }
  if (s->launch_host_func(s, &run_launch, launch) != FLAGOS_SUCCESS) {
    delete launch;
    return fail(FLAGOS_NATIVE_FAILED, "the sim stream refused the kernel (destroyed stream?)");
  }
  return FLAGOS_NATIVE_SUCCESS;
}

}  // namespace simk

extern "C" SIMK_API uint32_t simkGetAbiVersion(void) { return SIMK_ABI_VERSION; }
extern "C" SIMK_API const char* simkGetLastError(void) { return simk::g_last_error.c_str(); }

// flagos HAL kit: fault injection, the same for every HAL built on the kit.
//
// FLAGOS_<NAME>_FAULT=KIND:N,... (NAME: the HAL's kName upper-cased, so FLAGOS_SIM_FAULT,
// FLAGOS_CUDA_FAULT) makes the N-th call (1-based, from library load) counted by KIND fail
// with KIND's status, before the runtime is called: nothing happened on the device, as
// when a real runtime refuses a call. KIND:N:lost makes that call and every later call
// fail, as on a lost device. A kind counts the calls of all its ops with one counter
// ("memcpy:2" is the second copy, synchronous or not) and is named after the HAL call it
// fails. The same faults can be armed at run time through the test control
// (flagos_hal/test_control.h). Part of the header-only HAL kit (kit.hpp).
#pragma once

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "flagos_hal/flagos_hal.h"
#include "flagos_hal/kit/errors.hpp"

namespace flagos_hal {
namespace kit {

// The calls the kit lets a vendor intercept (V::intercept) and injects faults into, after
// the arguments were checked and before the runtime is called.
enum class Op {
  kMalloc, kFree, kHostMalloc, kHostFree, kMemcpy, kMemcpyAsync, kMemset, kMemsetAsync,
  kDeviceSynchronize, kStreamCreate, kStreamDestroy, kStreamQuery, kStreamSynchronize,
  kStreamWaitEvent, kEventRecord, kEventQuery, kEventSynchronize, kEventElapsedTime,
  kModuleLoad, kLaunchKernel, kReplayLaunch, kCount
};

// The ABI name of an interceptable call ("malloc", "stream_synchronize", ...).
inline const char* op_name(Op op) {
  static const char* const names[] = {
      "malloc", "free", "host_malloc", "host_free", "memcpy", "memcpy_async", "memset",
      "memset_async", "device_synchronize", "stream_create", "stream_destroy", "stream_query",
      "stream_synchronize", "stream_wait_event", "event_record", "event_query",
      "event_synchronize", "event_elapsed_time", "module_load", "launch_kernel", "replay_launch"};
  static_assert(sizeof names / sizeof names[0] == static_cast<size_t>(Op::kCount), "op names");
  return names[static_cast<size_t>(op)];
}

class FaultInjector {
 public:
  // Reads FLAGOS_<NAME>_FAULT for the HAL named `hal_name`.
  explicit FaultInjector(const char* hal_name) : variable_(variable_for(hal_name)) {
    for (int& k : kind_of_) k = -1;
    for (int k = 0; k < kKinds; ++k) {
      for (Op op : kinds()[k].ops) kind_of_[static_cast<int>(op)] = k;
      for (auto& a : at_[k]) a.store(0);
      calls_[k].store(0);
      kind_list_ += (k ? "," : "") + std::string(kinds()[k].name);
    }
    load_environment();
  }

  // Before a runtime call: SUCCESS, or the injected failure (with its message).
  Status check(Op op) {
    if (!counting_.load(std::memory_order_relaxed)) return FLAGOS_SUCCESS;
    int k = kind_of_[static_cast<int>(op)];
    if (k < 0) return FLAGOS_SUCCESS;
    uint64_t n = ++calls_[k];
    int lost = lost_.load(std::memory_order_relaxed);
    if (lost >= 0) {
      return fail(FLAGOS_ERROR_DEVICE_FAULT,
                  "%s: the device is lost after an injected fault of %s (%s %s:N:lost); every "
                  "call fails until it is reset", op_name(op), kinds()[lost].name,
                  variable_.c_str(), kinds()[lost].name);
    }
    for (auto& slot : at_[k]) {
      uint64_t at = slot.load(std::memory_order_relaxed);
      if (at == 0 || (at & ~kLostBit) != n) continue;
      if (at & kLostBit) {
        lost_.store(k);
        return fail(FLAGOS_ERROR_DEVICE_FAULT, "%s: injected fault (%s), the device is lost",
                    op_name(op), variable_.c_str());
      }
      return fail(kinds()[k].status, "%s: injected fault (%s)", op_name(op), variable_.c_str());
    }
    return FLAGOS_SUCCESS;
  }

  // The test control's arm: replaces every armed fault, counting from now.
  Status arm(const char* text) {
    std::vector<uint64_t> at[kKinds];
    std::string bad;
    if (!parse(text ? text : "", at, &bad)) {
      return fail(FLAGOS_ERROR_INVALID_VALUE,
                  "arm: bad fault entry '%s' (expected KIND:N or KIND:N:lost with N >= 1, at "
                  "most %d per kind, KIND one of %s)", bad.c_str(), kMaxPerKind, kind_list_.c_str());
    }
    std::lock_guard<std::mutex> lock(arm_mu_);
    counting_.store(true);
    lost_.store(-1);  // arming resets a lost device, as a device reset would
    for (int k = 0; k < kKinds; ++k) {
      uint64_t base = calls_[k].load();
      for (int i = 0; i < kMaxPerKind; ++i) {
        uint64_t a = i < static_cast<int>(at[k].size()) ? at[k][i] : 0;
        at_[k][i].store(a ? (base + (a & ~kLostBit)) | (a & kLostBit) : 0);
      }
    }
    return FLAGOS_SUCCESS;
  }

  Status calls(const char* kind, uint64_t* count) const {
    int k = kind ? kind_index(kind) : -1;
    if (k < 0 || !count) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "calls: unknown fault kind '%s' (one of %s)",
                  kind ? kind : "(null)", kind_list_.c_str());
    }
    *count = calls_[k].load();
    return FLAGOS_SUCCESS;
  }

  const char* kind_list() const { return kind_list_.c_str(); }

 private:
  struct Kind {
    const char* name;
    Status status;
    std::vector<Op> ops;
  };
  // A new kind is one line here: any call the kit intercepts can fail this way.
  static const Kind* kinds() {
    static const Kind k[] = {
        {"malloc", FLAGOS_ERROR_OUT_OF_MEMORY, {Op::kMalloc}},
        {"host_malloc", FLAGOS_ERROR_OUT_OF_MEMORY, {Op::kHostMalloc}},
        {"memcpy", FLAGOS_ERROR_DEVICE_FAULT, {Op::kMemcpy, Op::kMemcpyAsync}},
        {"memset", FLAGOS_ERROR_DEVICE_FAULT, {Op::kMemset, Op::kMemsetAsync}},
        {"free", FLAGOS_ERROR_DEVICE_FAULT, {Op::kFree}},
        {"stream_create", FLAGOS_ERROR_DEVICE_FAULT, {Op::kStreamCreate}},
        {"stream_query", FLAGOS_ERROR_DEVICE_FAULT, {Op::kStreamQuery}},
        {"stream_synchronize", FLAGOS_ERROR_DEVICE_FAULT, {Op::kStreamSynchronize}},
        {"stream_wait_event", FLAGOS_ERROR_DEVICE_FAULT, {Op::kStreamWaitEvent}},
        {"event_record", FLAGOS_ERROR_DEVICE_FAULT, {Op::kEventRecord}},
        {"event_query", FLAGOS_ERROR_DEVICE_FAULT, {Op::kEventQuery}},
        {"event_synchronize", FLAGOS_ERROR_DEVICE_FAULT, {Op::kEventSynchronize}},
        {"device_synchronize", FLAGOS_ERROR_DEVICE_FAULT, {Op::kDeviceSynchronize}},
        // the kernel extension (kernels.hpp): loading an image takes device memory
        {"module_load", FLAGOS_ERROR_OUT_OF_MEMORY, {Op::kModuleLoad}},
        {"launch_kernel", FLAGOS_ERROR_DEVICE_FAULT, {Op::kLaunchKernel}},
        // the stream capture (capture.hpp)
        {"replay_launch", FLAGOS_ERROR_DEVICE_FAULT, {Op::kReplayLaunch}},
    };
    static_assert(sizeof k / sizeof k[0] == kKinds, "kKinds counts the kinds");
    return k;
  }
  static constexpr int kKinds = 16;
  static constexpr int kMaxPerKind = 16;  // armed call numbers per kind
  static constexpr uint64_t kLostBit = uint64_t(1) << 63;  // KIND:N:lost

  static std::string variable_for(const char* hal_name) {
    std::string v = "FLAGOS_";
    for (const char* c = hal_name; c && *c; ++c) {
      v += std::isalnum(static_cast<unsigned char>(*c))
               ? static_cast<char>(std::toupper(static_cast<unsigned char>(*c))) : '_';
    }
    return v + "_FAULT";
  }

  static int kind_index(const std::string& name) {
    for (int k = 0; k < kKinds; ++k) {
      if (name == kinds()[k].name) return k;
    }
    return -1;
  }

  // "KIND:N,..." into per-kind call offsets; false (with `bad`, the entry) on error.
  static bool parse(const std::string& spec, std::vector<uint64_t> (&out)[kKinds], std::string* bad) {
    for (size_t pos = 0; pos <= spec.size();) {
      size_t comma = spec.find(',', pos);
      std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
      if (item.empty()) continue;
      size_t colon = item.find(':');
      int k = kind_index(item.substr(0, colon));
      long long n = colon == std::string::npos ? 0 : std::atoll(item.c_str() + colon + 1);
      size_t second = colon == std::string::npos ? std::string::npos : item.find(':', colon + 1);
      bool lost = second != std::string::npos && item.compare(second, std::string::npos, ":lost") == 0;
      if (k < 0 || n <= 0 || out[k].size() >= kMaxPerKind || (second != std::string::npos && !lost)) {
        *bad = item;
        return false;
      }
      // A lost device's fault is stored with the top bit set (call numbers never reach it).
      out[k].push_back(static_cast<uint64_t>(n) | (lost ? kLostBit : 0));
    }
    return true;
  }

  // Each entry on its own, so that one bad entry leaves the others armed.
  void load_environment() {
    const char* text = std::getenv(variable_.c_str());
    std::string spec(text ? text : "");
    for (size_t pos = 0; pos <= spec.size();) {
      size_t comma = spec.find(',', pos);
      std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
      if (item.empty()) continue;
      std::vector<uint64_t> at[kKinds];
      std::string bad;
      if (!parse(item, at, &bad)) {
        std::fprintf(stderr, "flagos HAL: warning: ignoring %s entry '%s' (expected KIND:N, KIND "
                     "one of %s)\n", variable_.c_str(), item.c_str(), kind_list_.c_str());
        continue;
      }
      int k = kind_index(item.substr(0, item.find(':')));
      for (auto& slot : at_[k]) {
        if (slot.load() == 0) {
          slot.store(at[k][0]);
          break;
        }
      }
      counting_.store(true);
    }
  }

  const std::string variable_;
  std::string kind_list_;  // "malloc,host_malloc,..."
  // Read by every intercepted call, from any thread, while a test may re-arm: atomics only.
  int kind_of_[static_cast<int>(Op::kCount)];  // op -> kind index, or -1
  std::atomic<uint64_t> at_[kKinds][kMaxPerKind];  // call numbers that fail; 0: unused
  std::atomic<uint64_t> calls_[kKinds];
  std::atomic<bool> counting_{false};  // the environment armed faults, or arm was called
  std::atomic<int> lost_{-1};  // the kind whose KIND:N:lost fault fired; -1: not lost
  std::mutex arm_mu_;
};

}  // namespace kit
}  // namespace flagos_hal

// The set of loaded HALs and the map from global flagos device indices to
// (HAL, local device). flagos:0..N-1 span every loaded HAL's devices in load order.
#pragma once

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "flagos_hal/loader.hpp"

namespace flagos {

struct HalDevice {
  const flagos_hal::Library* lib;  // owning HAL
  int local_index;                 // the HAL's own device index
  int hal_slot;                    // index into loaded_hals()
};

// Loads the HAL libraries at `paths` (in order). Called once, from Python, before
// any device use; a second call with the same paths is a no-op, with others an error.
void init_hals(const std::vector<std::string>& paths);
bool hals_initialized();
const std::vector<flagos_hal::Library>& loaded_hals();

c10::DeviceIndex device_count() noexcept;

namespace detail {
// Set once by init_hals and cleared in a forked child: the hot path's whole check.
extern const HalDevice* g_device_table;
extern std::atomic<int> g_usable_devices;
const HalDevice& hal_device_checked(c10::DeviceIndex index);  // raises what is wrong
}  // namespace detail

// The device behind a flagos index; raises a clear error for a bad index, before any HAL
// is loaded, and in a forked child. Called several times per op, hence inline.
inline const HalDevice& hal_device(c10::DeviceIndex index) {
  if (C10_LIKELY(index >= 0 && index < detail::g_usable_devices.load(std::memory_order_acquire))) {
    return detail::g_device_table[index];
  }
  return detail::hal_device_checked(index);
}
// Forked children must not touch the parent's devices (see hooks.cpp).
void disable_devices_after_fork();
inline const flagos_hal_table_t& hal_of(c10::DeviceIndex index) {
  return *hal_device(index).lib->table;
}
flagos_native_device_t native_device_of(c10::DeviceIndex index);
// The flagos device whose memory `ptr` lies in (its HAL's pointer_get_attributes), or
// nullopt when it is no flagos device's memory.
std::optional<c10::DeviceIndex> device_of_pointer(const void* ptr);

// Thread-local current flagos device (the HAL's own current device is set too).
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);

// Makes flagos:`device` this thread's current device until the end of the scope (also when
// it ends by an exception), then the previous one again.
class CurrentDeviceScope {
 public:
  explicit CurrentDeviceScope(c10::DeviceIndex device) : prev_(current_device()) {
    if (device != prev_) set_current_device(device);
  }
  ~CurrentDeviceScope() {
    if (current_device() != prev_) set_current_device(prev_);
  }
  CurrentDeviceScope(const CurrentDeviceScope&) = delete;
  CurrentDeviceScope& operator=(const CurrentDeviceScope&) = delete;

 private:
  c10::DeviceIndex prev_;
};

[[noreturn]] void throw_hal_error(const flagos_hal_table_t& hal, flagos_status_t st,
                                  const char* call, const char* file, int line);

}  // namespace flagos

// Calls a HAL function and turns a failure into a c10::Error naming the call.
#define FLAGOS_HAL_CHECK(hal, call_expr)                                          \
  do {                                                                            \
    flagos_status_t flagos_st_ = (call_expr);                                     \
    if (flagos_st_ != FLAGOS_SUCCESS)                                             \
      ::flagos::throw_hal_error((hal), flagos_st_, #call_expr, __FILE__, __LINE__); \
  } while (0)

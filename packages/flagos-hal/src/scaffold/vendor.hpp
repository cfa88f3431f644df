// The @name@ flagos HAL, built on the flagos HAL kit (flagos_hal/kit/kit.hpp).
//
// The kit implements the ABI's rules (argument checks, errors, registries of pointers,
// streams and events, default streams, the function table); these files are the runtime
// calls. As generated they are a working HAL on host memory whose asynchronous work runs
// synchronously, so the conformance suite passes before any line is changed. Replace each
// TODO(@name@) with your runtime's call, re-running the suite after each one:
//   python -m flagos_hal.conformance --hal @name@
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "flagos_hal/kit/kit.hpp"

namespace flagos_@name@ {

namespace kit = flagos_hal::kit;
using kit::Status;

struct @Name@Stream : kit::StreamBase {
  // TODO(@name@): your runtime's stream handle
};

struct @Name@Event : kit::EventBase {
  // TODO(@name@): your runtime's event handle
  std::chrono::steady_clock::time_point when;  // host-memory placeholder: time of the record
};

struct @Name@ : kit::VendorDefaults {
  static constexpr const char* kName = "@name@";
  // TODO(@name@): FLAGOS_NATIVE_CUDA / _CPU only if a native torch device can address your
  // device pointers directly; NONE keeps flagos to the HAL's copies.
  static constexpr flagos_native_device_t kNativeDevice = FLAGOS_NATIVE_CPU;
  // Policies (see kit::VendorDefaults): kCheckRanges, kSyncWaitsForDefaultStream,
  // kRefuseAfterFork.
  using Stream = @Name@Stream;
  using Event = @Name@Event;

  FLAGOS_HAL_KIT_RUNTIME_CALLS()
  // Before each runtime call on one device (e.g. your runtime's "set current device").
  static Status activate(int device);
};

}  // namespace flagos_@name@

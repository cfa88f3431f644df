// The @name@ HAL: opening the runtime, devices, and the exported entry point.
#include <cstdio>

#include "@name@.hpp"

namespace flagos_@name@ {

// Host-memory placeholders, until the runtime answers.
constexpr int kPlaceholderDevices = 2;
constexpr uint64_t kPlaceholderMemory = uint64_t(1) << 30;

Status @Name@::open(int* device_count) {
  // TODO(@name@): load your runtime (kit::RuntimeLibrary dlopens it and resolves its entry
  // points, so the HAL builds without your SDK), initialize it, count its devices. On
  // failure: return kit::fail(FLAGOS_ERROR_NO_DEVICE, "why"): the HAL reports 0 devices.
  *device_count = kPlaceholderDevices;
  return FLAGOS_SUCCESS;
}

std::string @Name@::version() {
  return "flagos @name@ HAL 0.1.0";  // TODO(@name@): add your runtime and driver versions
}

Status @Name@::properties(int device, flagos_device_properties_t* props) {
  // TODO(@name@): your runtime's device query
  std::snprintf(props->name, sizeof props->name, "@name@ device %d (host memory)", device);
  props->total_memory = kPlaceholderMemory;
  props->compute_units = 1;
  return FLAGOS_SUCCESS;
}

Status @Name@::activate(int) {
  return FLAGOS_SUCCESS;  // TODO(@name@): make the device current on this thread
}

}  // namespace flagos_@name@

FLAGOS_HAL_KIT_ENTRY(flagos_@name@::@Name@)

// Which native device, if any, addresses a flagos device's memory (its twin), as the
// HAL reports it and FLAGOS_NO_TWIN overrides it: what the runtime (generators,
// pinned memory) and the engines ask before touching memory from another device.
#include "runtime/twin.h"

#include <ATen/Context.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <string>

#include "runtime/hal.h"

namespace flagos {

namespace {
// FLAGOS_NO_TWIN=1, the no-twin mode, treats every HAL as opaque: a CUDA GPU then stands
// in for a chip without CUDA, and sim exercises the staged (copying) paths of vendors with
// opaque memory.
bool aliasing_disabled() {
  static bool disabled = [] {
    const char* v = std::getenv("FLAGOS_NO_TWIN");
    return v && *v && std::string(v) != "0";
  }();
  return disabled;
}

// What a device's HAL says about its twin never changes: asked once per device, since the
// engines ask on every op. kind: 0 none, 1 CPU, 2 CUDA; -1 not asked yet.
struct TwinInfo {
  std::atomic<int> kind{-1};
  std::atomic<int> index{-1};
};

TwinInfo& twin_info(c10::DeviceIndex device) {
  static std::array<TwinInfo, 64> infos;
  hal_device(device);  // range check
  TwinInfo& info = infos[device];
  if (info.kind.load(std::memory_order_acquire) < 0) {
    int kind = 0, index = -1;
    switch (native_device_of(device)) {
      case FLAGOS_NATIVE_CPU:
        kind = 1;
        break;
      case FLAGOS_NATIVE_CUDA: {
        kind = 2;
        // Twin kernels allocate through torch's CUDA allocator, which exists once CUDA is
        // initialized; a process that only ever touched flagos has not done that yet.
        at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
        flagos_device_properties_t props{};
        props.struct_size = sizeof(props);
        const auto& d = hal_device(device);
        FLAGOS_HAL_CHECK(*d.lib->table,
                         d.lib->table->get_device_properties(d.local_index, &props));
        index = props.native_device_index;
        break;
      }
      default:
        break;
    }
    info.index.store(index, std::memory_order_relaxed);
    info.kind.store(kind, std::memory_order_release);
  }
  return info;
}
}  // namespace

std::optional<c10::DeviceType> twin_device_type(c10::DeviceIndex device) {
  if (aliasing_disabled()) return std::nullopt;
  switch (twin_info(device).kind.load(std::memory_order_acquire)) {
    case 1:
      return c10::DeviceType::CPU;
    case 2:
      return c10::DeviceType::CUDA;
    default:
      return std::nullopt;
  }
}

c10::DeviceIndex twin_device_index(c10::DeviceIndex device) {
  return static_cast<c10::DeviceIndex>(twin_info(device).index.load(std::memory_order_acquire));
}

std::optional<c10::Device> device_twin(c10::DeviceIndex device) {
  auto twin = twin_device_type(device);
  if (!twin || *twin == c10::DeviceType::CPU) return std::nullopt;
  return c10::Device(*twin, twin_device_index(device));
}

bool host_addressable(c10::DeviceIndex device) {
  return twin_device_type(device) == c10::DeviceType::CPU;
}

}  // namespace flagos

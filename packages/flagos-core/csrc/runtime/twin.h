// The twin of a flagos device: the native device (the CPU for host-addressable HALs such
// as sim, CUDA for CUDA-addressable ones) whose kernels can read its memory in place, or
// none (opaque memory, or FLAGOS_NO_TWIN=1).
#pragma once

#include <c10/core/Device.h>

#include <optional>

namespace flagos {

// The twin device type of a flagos device, or nullopt when its memory is opaque.
std::optional<c10::DeviceType> twin_device_type(c10::DeviceIndex device);
// The index of the twin device (cuda:N) of a flagos device, or -1 (CPU twin or none).
c10::DeviceIndex twin_device_index(c10::DeviceIndex device);
// The twin device (cuda:N) of a flagos device whose memory a native *device* addresses;
// nullopt for a CPU twin (host memory) or none. Work for such a device runs there in place.
std::optional<c10::Device> device_twin(c10::DeviceIndex device);
// True when the memory of this flagos device can be read by the CPU in place.
bool host_addressable(c10::DeviceIndex device);

}  // namespace flagos

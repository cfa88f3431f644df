// Devices a HAL reported lost: after a DEVICE_FAULT, a device that fails a probe too is
// unusable for the rest of the process (as a CUDA context after a sticky error). flagos
// says so in every later HAL error and in torch.flagos.device_fault(); it does not stop
// calls to it (each fails in the HAL anyway), so freeing tensors stays possible.
#pragma once

#include <c10/core/Device.h>

#include <optional>
#include <string>

namespace flagos {

// The first error that left flagos:`index` unusable, or nullopt while it is usable.
std::optional<std::string> device_fault(c10::DeviceIndex index);

}  // namespace flagos

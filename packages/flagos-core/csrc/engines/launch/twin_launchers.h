// Launching a compiled kernel on a twin device, for the launch cache (launch_cache.h): the
// one place that knows a device's launch API. CPU: the function is a host function
// void(const uint32_t grid[3], void** params) (what the tests launch). CUDA: a CUfunction,
// launched with the driver's cuLaunchKernel on the twin's current stream; the driver is
// opened with dlopen(RTLD_NOLOAD) where torch has loaded it, so nothing CUDA is needed at
// build time. Other device types have no launcher: their ops run their Python kernels.
// (docs/architecture.md, "Departures from the design": why this sits above the HAL.)
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace flagos {

struct CompiledLaunch {
  uintptr_t function = 0;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block_threads = 0, shared_bytes = 0;
};

// Whether `device` has a launcher usable from this thread now (on CUDA a context must be
// current: a thread that has run no CUDA work has none).
bool twin_can_launch(c10::Device device);

// Launches `launch` on `device` (current) with `params`, each a pointer to its value;
// an empty grid launches nothing, as Triton. Returns the launcher's error text, empty when
// launched.
std::string twin_launch(const CompiledLaunch& launch, c10::Device device, void** params);

}  // namespace flagos

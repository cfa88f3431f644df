// Kernels on flagos devices through the HAL's kernel extension (flagos_hal.h, ABI 1.2):
// binary images loaded onto a device, kernels launched on the current flagos stream with
// flagos device pointers. The one launch path of every HAL; the launch cache relaunches
// recorded launches through it (launch_cache.h).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "flagos_hal/flagos_hal.h"

namespace flagos {

// One launch's shape: a kernel of a module loaded on flagos:device.
struct KernelLaunch {
  c10::DeviceIndex device = 0;
  flagos_function_t function = nullptr;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t shared_bytes = 0;
};

// A tensor descriptor passed by value (ABI 1.5, kernel_encode_tensor_descriptor): the
// bytes the HAL encodes, in storage aligned as a CUtensorMap must be.
constexpr size_t kMaxTensorDescriptorBytes = 512;
struct alignas(64) TensorDescriptorBytes {
  unsigned char bytes[kMaxTensorDescriptorBytes];
};

// Encodes `info` (its base set) with the HAL of flagos:device into `out`, its length in
// *size. Returns the HAL's status; on failure (also where the HAL encodes no descriptors)
// `error` holds why.
flagos_status_t encode_tensor_descriptor(c10::DeviceIndex device, const flagos_tensor_descriptor_info_t& info,
                                         TensorDescriptorBytes& out, size_t* size, std::string* error);

// Launches on `stream`, a flagos stream of l.device: params[i] points to the value of
// parameter i, sizes[i] bytes. A grid with a zero dimension launches nothing (as Triton).
// Returns the HAL's status; on failure `error` holds the HAL's message.
flagos_status_t launch_kernel(const KernelLaunch& l, const c10::Stream& stream, void* const* params,
                              const size_t* sizes, int n, std::string* error);

// launch_kernel with the GIL released (a HAL may block while its queue is full); raises
// with the HAL's message when the launch fails.
void launch_kernel_from_python(const KernelLaunch& l, const c10::Stream& stream,
                               void* const* params, const size_t* sizes, int n);

// flagos._C: _kernel_formats, _kernel_target, _KernelModule, _kernel_launch,
// _kernel_encode_tensor_descriptor.
void bind_hal_kernels(pybind11::module& m);

// flagos._C._TypedLauncher and _current_stream_id (typed_launch.cpp): launches of one
// compiled kernel from Python with its parameters converted in C++. The kinds of its
// parameters are fixed once (from the kernel's signature), and each launch turns the
// Python values straight into parameter slots: the launch path of flagos.triton_driver,
// where a Triton launch's host cost is a small op's whole budget.
void bind_typed_launch(pybind11::module& m);

}  // namespace flagos

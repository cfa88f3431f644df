// Results of device-twin (CUDA) kernels made in flagos memory, so that they need no copy.
//
// On a CUDA-addressable HAL the twin engine runs CUDA kernels on CUDA aliases of flagos
// memory. A kernel that allocates its result (a convolution, batch norm, every functional
// op) takes it from the CUDA caching allocator: CUDA memory, which then has to be copied
// into flagos memory (a device-to-device copy per result, and the host work of a copy).
// The CUDA counterpart of host_results.h: while a DeviceResultsOnFlagos scope is active on
// a thread, the CUDA allocations of that thread on the twin device come from the flagos
// allocator (counted there, like every flagos byte; nothing reserved by a second pool);
// adopt_device_result then turns such a result into a flagos tensor in place.
//
// The CUDA side is an allocator that wraps the CUDA caching allocator (csrc_cuda/), built
// only against a torch with CUDA; without it install_device_results_allocator() is false
// and results are copied.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Allocator.h>

#include <optional>

namespace flagos {

// Installs the CUDA allocator that serves DeviceResultsOnFlagos scopes (once; it forwards
// everything to the previous CUDA allocator outside a scope). False where flagos was built
// without CUDA support.
bool install_device_results_allocator();

// While alive, this thread's CUDA allocations on CUDA device `twin` come from flagos
// `device`'s allocator, on its current stream (the twin kernel's stream).
class DeviceResultsOnFlagos {
 public:
  DeviceResultsOnFlagos(c10::DeviceIndex device, c10::DeviceIndex twin);
  ~DeviceResultsOnFlagos();
  DeviceResultsOnFlagos(const DeviceResultsOnFlagos&) = delete;
  DeviceResultsOnFlagos& operator=(const DeviceResultsOnFlagos&) = delete;

 private:
  c10::DeviceIndex previous_device_;
  c10::DeviceIndex previous_twin_;
};

// For the CUDA allocator: inside a scope and on its twin device (`cuda_device`, the
// current CUDA device), n bytes of flagos memory as a DataPtr of that CUDA device; an
// empty DataPtr otherwise, or where flagos memory is short (the caller then allocates as
// it would have: temporaries need not fail for it).
c10::DataPtr allocate_device_result(size_t n, c10::DeviceIndex cuda_device);

// `t` (a twin tensor) made a tensor of flagos:`device` in place, same bytes, when its
// storage came from allocate_device_result and nothing else holds `t` or its storage;
// returns it. nullopt otherwise (`t` untouched; the caller copies).
std::optional<at::Tensor> adopt_device_result(const at::Tensor& t, c10::DeviceIndex device);

}  // namespace flagos

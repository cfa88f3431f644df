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
// Only ATen's kernels run in the scope: an extension's kernel may allocate through
// Allocator::raw_allocate, which needs the DataPtr's context to be its pointer (a flagos
// block's is the block), so extension ops' results are copied as before. Only allocations
// on the kernel's own (twin) stream are served.
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

// While alive, this thread's CUDA allocations on CUDA device `twin` and its current stream
// `stream` (the twin stream under the current flagos stream, where the kernel runs) come
// from flagos `device`'s allocator, on that flagos stream.
class DeviceResultsOnFlagos {
 public:
  DeviceResultsOnFlagos(c10::DeviceIndex device, c10::DeviceIndex twin, c10::StreamId stream);
  ~DeviceResultsOnFlagos();
  DeviceResultsOnFlagos(const DeviceResultsOnFlagos&) = delete;
  DeviceResultsOnFlagos& operator=(const DeviceResultsOnFlagos&) = delete;

 private:
  c10::DeviceIndex previous_device_;
  c10::DeviceIndex previous_twin_;
  c10::StreamId previous_stream_;
};

struct DeviceResultsScope {
  c10::DeviceIndex device = -1;  // flagos device, -1 outside scopes
  c10::DeviceIndex twin = -1;    // its CUDA device
  c10::StreamId stream = 0;      // the CUDA stream the kernel runs on
};
// This thread's active scope, nullptr outside scopes: what the CUDA allocator asks first.
const DeviceResultsScope* active_device_results();

// For the CUDA allocator, inside `scope` on its twin device and stream: n > 0 bytes of
// flagos memory as a DataPtr of the twin CUDA device. Without `may_free_cached`, an empty
// DataPtr where that does not fit without freeing flagos' cached blocks (the caller then
// asks the CUDA allocator, as without the scope); with it, flagos' cache is freed first
// and a flagos out-of-memory error raised if that is not enough.
c10::DataPtr allocate_device_result(const DeviceResultsScope& scope, size_t n,
                                    bool may_free_cached);

// `t` (a twin tensor) made a tensor of flagos:`device` in place, same bytes, when its
// storage came from allocate_device_result and nothing else holds `t` or its storage;
// returns it. nullopt otherwise (`t` untouched; the caller copies).
std::optional<at::Tensor> adopt_device_result(const at::Tensor& t, c10::DeviceIndex device);

}  // namespace flagos

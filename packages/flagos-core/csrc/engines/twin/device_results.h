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
// ATen's kernels run in the scope, and the kernels of extension ops declared factory-only
// (allow_device_results_for, engines/twin/twin_call.h): another extension's kernel may allocate
// through Allocator::raw_allocate, which needs the DataPtr's context to be its pointer (a
// flagos block's is the block; it fails loudly there), so undeclared extension ops' results
// are copied. Only allocations on the kernel's own (twin) stream are served.
//
// Nothing here is CUDA's: a twin device type gets device results when an allocator for it
// registers an installer (register_device_results_installer). CUDA's wraps torch's CUDA
// caching allocator (csrc_cuda/); CMake builds it in only against a torch with CUDA.
// Without an installer, device_results_on() is false and results are copied.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Allocator.h>

#include <optional>

namespace flagos {

// Installs, once, the allocator that serves DeviceResultsOnFlagos scopes on twin device
// type `twin` (it forwards everything to the twin's own allocator outside a scope); false
// where none is registered for it, or with FLAGOS_DEVICE_RESULTS=0.
bool device_results_on(c10::DeviceType twin);

// Registered by a twin's results allocator at library load: installs it, and says whether
// it took.
using DeviceResultsInstaller = bool (*)();
bool register_device_results_installer(c10::DeviceType twin, DeviceResultsInstaller install);

struct DeviceResultsScope {
  c10::DeviceIndex device = -1;            // flagos device, -1 outside scopes
  c10::Device twin{c10::DeviceType::CPU};  // its twin device
  c10::StreamId stream = 0;                // the twin stream the kernel runs on
};

// While alive, this thread's allocations on the `scope`'s twin device and stream (the twin
// stream under the current flagos stream, where the kernel runs) come from its flagos
// device's allocator, on that flagos stream.
class DeviceResultsOnFlagos {
 public:
  explicit DeviceResultsOnFlagos(const DeviceResultsScope& scope);
  ~DeviceResultsOnFlagos();
  DeviceResultsOnFlagos(const DeviceResultsOnFlagos&) = delete;
  DeviceResultsOnFlagos& operator=(const DeviceResultsOnFlagos&) = delete;

 private:
  DeviceResultsScope previous_;
};

// This thread's active scope, nullptr outside scopes: what a twin's allocator asks first.
const DeviceResultsScope* active_device_results();

// For a twin's allocator, inside `scope` on its twin device and stream: n > 0 bytes of
// flagos memory as a DataPtr of the twin device. Without `may_free_cached`, an empty
// DataPtr where that does not fit without freeing flagos' cached blocks (the caller then
// asks the twin's allocator, as without the scope); with it, flagos' cache is freed first
// and a flagos out-of-memory error raised if that is not enough.
c10::DataPtr allocate_device_result(const DeviceResultsScope& scope, size_t n,
                                    bool may_free_cached);

// `t` (a twin tensor) made a tensor of flagos:`device` in place, same bytes, when its
// storage came from allocate_device_result and nothing else holds `t` or its storage;
// returns it. nullopt otherwise (`t` untouched; the caller copies).
std::optional<at::Tensor> adopt_device_result(const at::Tensor& t, c10::DeviceIndex device);

}  // namespace flagos

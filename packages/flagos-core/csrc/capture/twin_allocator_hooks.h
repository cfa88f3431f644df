// The twin device's own caching allocator during a flagos capture. Twin kernels (PyTorch's
// CUDA kernels under boxing) take their temporaries from PyTorch's allocator, not from
// flagos': a block one of them frees during the capture must not serve other tensors while
// the graph may replay. So each capture also opens a private pool of the twin's allocator
// (PyTorch's graph pools, the ones torch.cuda.graph uses), held as long as the flagos pool.
// The hooks are set from Python (flagos/graphs.py), where PyTorch exposes that pool API;
// unset, or on a twin without such an allocator, they do nothing.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <functional>

namespace flagos {
namespace capture {

struct TwinAllocatorHooks {
  // Allocations of the twin of flagos:device go to the twin pool of flagos pool `pool`
  // (created, or given one more user) until end_allocate.
  std::function<void(c10::DeviceIndex device, c10::MempoolId_t pool)> begin_allocate;
  std::function<void(c10::DeviceIndex device, c10::MempoolId_t pool)> end_allocate;
  // One user of the twin pool is gone; the last one frees it.
  std::function<void(c10::DeviceIndex device, c10::MempoolId_t pool)> release;
};

void set_twin_allocator_hooks(TwinAllocatorHooks hooks);
void twin_begin_allocate(c10::DeviceIndex device, c10::MempoolId_t pool);
void twin_end_allocate(c10::DeviceIndex device, c10::MempoolId_t pool);
void twin_release(c10::DeviceIndex device, c10::MempoolId_t pool);

}  // namespace capture
}  // namespace flagos

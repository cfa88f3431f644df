// Results of CPU-twin kernels made in flagos memory, so that they need no copy.
//
// On a host-addressable HAL (sim) the twin engine runs ATen's CPU kernels on CPU aliases
// of flagos memory. A kernel that allocates its result (relu, a convolution, most ops
// without an out= form) would put it in CPU memory, which then has to be copied into
// flagos memory. While a HostResultsOnFlagos scope is active on a thread, the CPU
// allocator of that thread allocates from the flagos allocator of the scope's device
// instead (the bytes are counted there like every flagos byte) where that fits without
// evicting cached memory; adopt_as_flagos then turns such a result into a flagos tensor
// in place.
#pragma once

#include <ATen/Tensor.h>

#include <optional>

namespace flagos {

// Installs the CPU allocator that serves HostResultsOnFlagos scopes (once; it delegates
// to the previous CPU allocator outside a scope). False when another allocator of higher
// priority holds the CPU slot: results are then copied as before.
bool install_host_results_allocator();

// While alive, CPU allocations on this thread come from flagos:`device`'s allocator.
// Adopting (or freeing) them before the scope ends takes no lock.
class HostResultsOnFlagos {
 public:
  explicit HostResultsOnFlagos(c10::DeviceIndex device);
  ~HostResultsOnFlagos();
  HostResultsOnFlagos(const HostResultsOnFlagos&) = delete;
  HostResultsOnFlagos& operator=(const HostResultsOnFlagos&) = delete;

 private:
  c10::DeviceIndex previous_;
};

// `t` (a CPU tensor) made a flagos tensor of flagos:`device` in place, same bytes, when
// its storage was allocated in a HostResultsOnFlagos scope and nothing else holds `t` or
// its storage (`t` itself must be the only reference: pass the kernel's result, not a
// copy); returns it. nullopt otherwise (`t` untouched), and for conj/neg views (the
// caller copies).
std::optional<at::Tensor> adopt_as_flagos(const at::Tensor& t, c10::DeviceIndex device);

}  // namespace flagos

// Zero-copy aliases of flagos tensors as tensors of the HAL's native twin device
// (CPU for host-addressable HALs such as sim). The alias is a separate TensorImpl
// sharing the bytes, so the caller's tensor is never mutated to make it.
#pragma once

#include <ATen/Tensor.h>

namespace flagos {

// The twin device type of a flagos device, or nullopt when its memory is opaque.
std::optional<c10::DeviceType> twin_device_type(c10::DeviceIndex device);
// The index of the twin device (cuda:N) of a flagos device, or -1 (CPU twin or none).
c10::DeviceIndex twin_device_index(c10::DeviceIndex device);
// True when the memory of this flagos device can be read by the CPU in place.
bool host_addressable(c10::DeviceIndex device);
// `t` (on flagos) viewed as a tensor of `twin`, same sizes, strides, offset and bytes.
// The alias keeps `t`'s storage alive. Resizable: a kernel may reallocate it (out=).
at::Tensor alias_as(const at::Tensor& t, c10::Device twin);
// Like alias_as, but the alias does not keep `t`'s storage alive: for use within one op
// call while the caller holds `t`. Served from a per-thread cache when possible.
at::Tensor borrowed_alias(const at::Tensor& t, c10::Device twin);
// A flagos tensor sharing `original`'s storage with `view`'s geometry (view of an alias).
at::Tensor flagos_view_of(const at::Tensor& original, const at::Tensor& view);
// Waits for the current stream of `device` so that host code can touch its memory.
void sync_for_host_access(c10::DeviceIndex device);

}  // namespace flagos

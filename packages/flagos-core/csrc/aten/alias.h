// Zero-copy aliases of flagos tensors as tensors of the HAL's native twin device
// (CPU for host-addressable HALs such as sim). The alias is a separate TensorImpl
// sharing the bytes, so the caller's tensor is never mutated to make it.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "runtime/twin.h"

namespace flagos {

// A defined tensor on a flagos device.
inline bool is_flagos(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// a == b for the few sizes or strides of a tensor. Inline: a memcmp call per field is a
// measurable share of the checks that run for every argument of every routed op.
inline bool same_ints(c10::IntArrayRef a, c10::IntArrayRef b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

// `t` (on flagos) viewed as a tensor of `twin`, same sizes, strides, offset and bytes.
// The alias keeps `t`'s storage alive. Resizable: a kernel may reallocate it (out=).
at::Tensor alias_as(const at::Tensor& t, c10::Device twin);
// Like alias_as, but the alias does not keep `t`'s storage alive: for use within one op
// call while the caller holds `t`. Served from a per-thread cache when possible.
at::Tensor borrowed_alias(const at::Tensor& t, c10::Device twin);
// `t`'s geometry over an existing alias storage of `t`'s flagos storage: two arguments of
// one op that share flagos memory then share it on the twin too, so the kernel's overlap
// checks (x[1:].add_(x[:-1])) see what they see natively.
at::Tensor alias_on(const c10::Storage& twin_storage, const at::Tensor& t);
// A flagos tensor sharing `original`'s storage with `view`'s geometry (view of an alias).
at::Tensor flagos_view_of(const at::Tensor& original, const at::Tensor& view);
// Waits for the current stream of `device` so that host code can touch its memory.
void sync_for_host_access(c10::DeviceIndex device);

// Makes the twin device current and its current stream the twin stream under the given
// flagos stream (its native handle; c10 names an external CUDA stream by that handle as
// its stream id), restoring both on scope exit, also when the kernel throws. Twin work
// issued inside is thereby ordered with the flagos work on that stream.
class TwinStreamGuard {
 public:
  TwinStreamGuard(c10::Device twin, const c10::Stream& flagos_stream)
      : impl_(c10::impl::getDeviceGuardImpl(twin.type())),
        twin_stream_(static_cast<c10::StreamId>(reinterpret_cast<intptr_t>(
            c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)
                ->getStreamNativeHandle(flagos_stream)))),
        prev_device_(impl_->exchangeDevice(twin)),
        prev_stream_(impl_->exchangeStream(c10::Stream(c10::Stream::UNSAFE, twin, twin_stream_))) {}
  ~TwinStreamGuard() {
    impl_->exchangeStream(prev_stream_);
    impl_->exchangeDevice(prev_device_);
  }
  TwinStreamGuard(const TwinStreamGuard&) = delete;
  TwinStreamGuard& operator=(const TwinStreamGuard&) = delete;

  // The id of the twin stream made current (the one the twin's kernels now run on).
  c10::StreamId twin_stream() const { return twin_stream_; }

 private:
  const c10::impl::DeviceGuardImplInterface* impl_;
  c10::StreamId twin_stream_;
  c10::Device prev_device_;
  c10::Stream prev_stream_;
};

}  // namespace flagos

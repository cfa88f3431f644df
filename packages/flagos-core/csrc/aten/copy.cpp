// _copy_from / _copy_from_and_resize: copies between CPU and flagos and between flagos
// devices (of one HAL or of two), any strides, with dtype conversion.
//
// Two paths. Host-addressable HALs (sim) alias both sides as CPU tensors and let the
// CPU copy kernel do layout and dtype in one pass. Opaque HALs stage through the
// host: dense spans move with one HAL memcpy, layout and dtype are done on the CPU.
#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "aten/alias.h"
#include "aten/copy.h"
#include "capture/capture_state.h"
#include "capture/host_tasks.h"
#include "engines/launch/launch_cache.h"
#include "runtime/device_activity.h"
#include "runtime/hal_raise.h"
#include "runtime/host_allocator.h"
#include "runtime/stream.h"

namespace flagos {
namespace {

// After a failed synchronize of `s`, the copy queued on it may still read or write host
// memory that the caller frees as soon as the error unwinds (a staging buffer): wait for
// it by other means first. On sim a failed synchronize leaves the work running, and this
// is what kept a write into freed heap memory from happening.
void wait_out_after_failed_sync(const flagos_hal_table_t& hal, flagos_stream_t s, int local) {
  if (hal.device_synchronize(local) == FLAGOS_SUCCESS) return;
  for (int i = 0; i < 1000000 && hal.stream_query(s) == FLAGOS_ERROR_NOT_READY; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void hal_copy(c10::DeviceIndex device, void* dst, const void* src, size_t bytes,
              flagos_memcpy_kind_t kind, bool non_blocking, const void* pinned_host) {
  if (bytes == 0) return;
  const auto& hal = hal_of(device);
  auto stream = current_stream(device);
  if (C10_UNLIKELY(capture::is_capturing(stream)) && kind != FLAGOS_MEMCPY_DEVICE_TO_DEVICE &&
      !(non_blocking && pinned_host)) {
    // A replay could not wait for the host; a copy from pinned memory it can repeat.
    capture::refuse("a blocking copy between flagos:" + std::to_string(device) +
                        " and host memory (use pinned memory and non_blocking=True)",
                    device);
  }
  flagos_stream_t hs = hal_stream(stream);
  {
    static const std::string names[] = {"Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD"};
    device_activity::Scope span(device_activity::Kind::Memcpy,
                                names[kind == FLAGOS_MEMCPY_HOST_TO_DEVICE   ? 0
                                      : kind == FLAGOS_MEMCPY_DEVICE_TO_HOST ? 1
                                                                             : 2],
                                nullptr, device, bytes);
    FLAGOS_HAL_CHECK(hal, hal.memcpy_async(dst, src, bytes, kind, hs));
  }
  if (kind == FLAGOS_MEMCPY_DEVICE_TO_DEVICE) return;  // stream-ordered like any device work
  if (non_blocking && pinned_host) {
    // In a capture, no event may be recorded; the graph keeps such memory itself.
    if (!capture::is_capturing(stream)) record_pinned_use(pinned_host, stream);
    return;
  }
  flagos_status_t st = hal.stream_synchronize(hs);
  if (st != FLAGOS_SUCCESS) {
    wait_out_after_failed_sync(hal, hs, hal_device(device).local_index);
    FLAGOS_HAL_RAISE(hal, st, "stream_synchronize");
  }
}

// A CPU tensor with `src`'s values (same dtype and geometry) read from flagos.
at::Tensor read_to_host(const at::Tensor& src) {
  auto [lo, hi] = byte_span(src);
  auto buf = at::empty({static_cast<int64_t>(hi - lo)}, at::TensorOptions().dtype(at::kByte));
  const char* base = static_cast<const char*>(src.storage().data());
  hal_copy(src.device().index(), buf.data_ptr(), base + lo, hi - lo, FLAGOS_MEMCPY_DEVICE_TO_HOST,
           false, nullptr);
  int64_t item = src.element_size();
  return buf.view(src.scalar_type()).as_strided(src.sizes(), src.strides(),
                                                src.storage_offset() - int64_t(lo) / item);
}

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes().equals(b.sizes()) && a.strides().equals(b.strides()) &&
         a.is_non_overlapping_and_dense() && b.is_non_overlapping_and_dense();
}

char* span_base(const at::Tensor& t) {
  return static_cast<char*>(t.storage().mutable_data()) + byte_span(t).first;
}

// Writes CPU tensor `src` (any dtype/layout) into flagos tensor `dst`.
void write_from_host(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  auto [lo, hi] = byte_span(dst);
  auto device = dst.device().index();
  if (same_layout(dst, src)) {
    const char* from = span_base(src);
    hal_copy(device, span_base(dst), from, hi - lo, FLAGOS_MEMCPY_HOST_TO_DEVICE, non_blocking,
             is_pinned_ptr(from) ? from : nullptr);
    return;
  }
  at::Tensor view;
  if (dst.is_non_overlapping_and_dense()) {
    // No gaps: lay the values out exactly as dst does, then one memcpy.
    auto buf = at::empty({static_cast<int64_t>(hi - lo)}, at::TensorOptions().dtype(at::kByte));
    int64_t item = dst.element_size();
    view = buf.view(dst.scalar_type())
               .as_strided(dst.sizes(), dst.strides(), dst.storage_offset() - int64_t(lo) / item);
  } else {
    // Gaps between elements: read-modify-write the span so the gaps keep their bytes.
    view = read_to_host(dst);
  }
  view.copy_(src);
  hal_copy(device, span_base(dst), span_base(view), hi - lo, FLAGOS_MEMCPY_HOST_TO_DEVICE, false,
           nullptr);
}

// Both devices of one HAL whose memory a device twin addresses (CUDA): the twin's copy
// kernel does layout, dtype and peer transfer on the current flagos stream of `dst`'s
// device, with no round trip through the host.
bool copy_on_device_twin(const at::Tensor& src, const at::Tensor& dst) {
  auto sdev = src.device().index(), ddev = dst.device().index();
  if (hal_device(sdev).hal_slot != hal_device(ddev).hal_slot) return false;
  auto from = device_twin(sdev), to = device_twin(ddev);
  if (!from || !to) return false;
  TwinStreamGuard on_flagos_stream(*to, current_stream(ddev));
  borrowed_alias(dst, *to).copy_(borrowed_alias(src, *from));
  return true;
}

void copy_flagos_to_flagos(const at::Tensor& src, const at::Tensor& dst) {
  auto sdev = src.device().index(), ddev = dst.device().index();
  if (sdev != ddev) sync_for_host_access(sdev);  // src's producer may run on another stream
  if (sdev == ddev && host_addressable(sdev) && capture::current_stream_capturing(sdev)) {
    // Recorded on the stream, run at each replay (capture/host_tasks.h).
    c10::Device cpu(c10::kCPU);
    capture::queue_host_task(sdev, "copy_", [to = alias_as(dst, cpu), from = alias_as(src, cpu)]()
                                                mutable { to.copy_(from); });
    return;
  }
  if (sdev == ddev && host_addressable(sdev)) {
    sync_for_host_access(sdev);
    alias_as(dst, c10::Device(c10::kCPU)).copy_(alias_as(src, c10::Device(c10::kCPU)));
    return;
  }
  if (copy_on_device_twin(src, dst)) return;
  if (hal_device(sdev).hal_slot == hal_device(ddev).hal_slot && same_layout(src, dst)) {
    auto [lo, hi] = byte_span(src);
    hal_copy(ddev, span_base(dst), span_base(src), hi - lo, FLAGOS_MEMCPY_DEVICE_TO_DEVICE, true,
             nullptr);
    return;
  }
  write_from_host(dst, read_to_host(src), false);
}

void copy_flagos_to_cpu(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  auto device = src.device().index();
  if (same_layout(src, dst) && is_pinned_ptr(span_base(dst)) && non_blocking) {
    auto [lo, hi] = byte_span(src);
    hal_copy(device, span_base(dst), span_base(src), hi - lo, FLAGOS_MEMCPY_DEVICE_TO_HOST, true,
             span_base(dst));
    return;
  }
  if (host_addressable(device)) {
    sync_for_host_access(device);
    dst.copy_(alias_as(src, c10::Device(c10::kCPU)));
    return;
  }
  if (same_layout(src, dst)) {
    auto [lo, hi] = byte_span(src);
    hal_copy(device, span_base(dst), span_base(src), hi - lo, FLAGOS_MEMCPY_DEVICE_TO_HOST, false,
             nullptr);
    return;
  }
  dst.copy_(read_to_host(src));
}

void copy_cpu_to_flagos(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  auto device = dst.device().index();
  bool async_pinned = non_blocking && same_layout(src, dst) && is_pinned_ptr(span_base(src));
  if (src.unsafeGetTensorImpl()->is_wrapped_number() && dst.numel() == 1 &&
      capture::current_stream_capturing(device)) {
    // A Python number moved to the device inside a capture is a constant of the graph, as a
    // scalar kernel argument is: its value is taken now.
    copy_constant_in_capture(src.to(dst.scalar_type()), dst);
    return;
  }
  if (!async_pinned && host_addressable(device)) {
    sync_for_host_access(device);
    alias_as(dst, c10::Device(c10::kCPU)).copy_(src);
    return;
  }
  write_from_host(dst, src, non_blocking);
}

// True when `other` lives on the native twin device of flagos tensor `f` (cuda:N for a
// CUDA-addressable HAL): the two can copy directly, as tensors of one device.
bool is_twin_of(const at::Tensor& f, const at::Tensor& other) {
  if (other.device().is_cpu()) return false;
  auto twin = twin_device_type(f.device().index());
  return twin && *twin == other.device().type();
}

// Copies between flagos and its twin device with the twin's own copy kernel: the flagos
// side is aliased. Both sides are ordered by synchronizing: flagos work queued so far
// finishes first, and the twin's copy finishes before flagos work that follows.
void copy_with_twin(const at::Tensor& src, const at::Tensor& dst, bool src_is_flagos) {
  const at::Tensor& f = src_is_flagos ? src : dst;
  const at::Tensor& t = src_is_flagos ? dst : src;
  sync_for_host_access(f.device().index());
  auto alias = alias_as(f, t.device());
  if (src_is_flagos) dst.copy_(alias);
  else alias.copy_(src);
  auto* guard = c10::impl::getDeviceGuardImpl(t.device().type());
  guard->synchronizeStream(guard->getStream(t.device()));
}

}  // namespace

void copy_constant_in_capture(const at::Tensor& value, const at::Tensor& dst) {
  auto device = dst.device().index();
  TORCH_CHECK(dst.is_contiguous() && value.scalar_type() == dst.scalar_type() &&
                  value.numel() == dst.numel(),
              "flagos: writing a constant into a non-contiguous flagos:", int(device),
              " tensor cannot be captured; make it contiguous");
  at::Tensor host = value.contiguous();
  c10::DataPtr pinned = pinned_host_allocator()->allocate(host.nbytes());
  std::memcpy(pinned.get(), host.data_ptr(), host.nbytes());
  hal_copy(device, dst.data_ptr(), pinned.get(), host.nbytes(), FLAGOS_MEMCPY_HOST_TO_DEVICE,
           true, pinned.get());
  capture::keep_alive(current_stream(device), std::move(pinned));
}

// Bytes [first, last) of the storage that `t`'s elements touch, as offsets.
std::pair<size_t, size_t> byte_span(const at::Tensor& t) {
  if (t.numel() == 0) return {0, 0};
  int64_t lo = t.storage_offset(), hi = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t extent = (t.size(d) - 1) * t.stride(d);
    if (extent < 0) lo += extent;
    else hi += extent;
  }
  size_t item = t.element_size();
  return {static_cast<size_t>(lo) * item, static_cast<size_t>(hi + 1) * item};
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(at::is_expandable_to(self.sizes(), dst.sizes()) || self.numel() == dst.numel(),
              "flagos copy: size mismatch ", self.sizes(), " vs ", dst.sizes());
  if (dst.numel() == 0) return dst;
  // Device work a launch-cache relaunch would not repeat, however the kernel reached it
  // (a copy made below Python's dispatch modes, or by a C++ kernel).
  spoil_launch_recording();
  at::Tensor src = self;
  if ((src.is_conj() || src.is_neg()) && is_flagos(src)) {
    // Resolve lazy conjugate/negative bits on the host: resolving them on flagos would
    // copy through here again.
    bool conj = src.is_conj(), neg = src.is_neg();
    src = read_to_host(src);
    if (conj) src._set_conj(true);
    if (neg) src._set_neg(true);
  }
  if (src.is_conj() || src.is_neg()) src = src.resolve_conj().resolve_neg();
  bool src_f = is_flagos(src), dst_f = is_flagos(dst);
  if (src_f != dst_f && is_twin_of(src_f ? src : dst, src_f ? dst : src)) {
    copy_with_twin(src, dst, src_f);
    return dst;
  }
  TORCH_CHECK(src_f || src.device().is_cpu(), "flagos copy: cannot copy from ", src.device(),
              " to ", dst.device(), "; move the tensor to the CPU first");
  TORCH_CHECK(dst_f || dst.device().is_cpu(), "flagos copy: cannot copy from ", src.device(),
              " to ", dst.device(), "; move the tensor to the CPU first");
  if (src.sizes() != dst.sizes()) src = src.expand(dst.sizes());
  if (src_f && dst_f) copy_flagos_to_flagos(src, dst);
  else if (src_f) copy_flagos_to_cpu(src, dst, non_blocking);
  else copy_cpu_to_flagos(src, dst, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Tensor read_for_host(const at::Tensor& src) { return read_to_host(src); }

// copy_ hands flagos copies to _copy_from; the Conjugate/Negative fallbacks would resolve a
// lazy source by cloning it, i.e. by copying through _copy_from again (endless recursion).
// Let the bits through: copy_from resolves them. (_copy_from is only reached by backends
// outside ATen's own copy kernels: PrivateUse1 here.)
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace flagos

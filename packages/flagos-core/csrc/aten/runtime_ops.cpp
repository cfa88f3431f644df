// The ops that belong to the runtime, implemented on the HAL rather than routed:
// allocation, views and geometry, resize_/set_, copies, scalars, fill_/zero_.
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include "aten/runtime_ops.h"

#include "aten/alias.h"
#include "aten/copy.h"
#include "capture/capture_state.h"
#include "capture/host_tasks.h"
#include "engines/launch/launch_cache.h"
#include "runtime/allocator.h"
#include "runtime/device_activity.h"
#include "runtime/resize.h"
#include "runtime/stream.h"

namespace flagos {

at::Tensor empty_strided_on(c10::IntArrayRef size, c10::IntArrayRef stride, at::ScalarType dtype,
                            c10::DeviceIndex device) {
  CurrentDeviceScope guard(device);  // the allocator serves the current device
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
}

void record_data_ptr_on_stream(const c10::DataPtr& data_ptr, const c10::Stream& stream);

namespace {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

c10::DeviceIndex device_or_current(std::optional<c10::Device> device) {
  if (device && device->has_index()) return device->index();
  return current_device();
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!pin_memory.value_or(false), "flagos: only CPU tensors can be pinned");
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "flagos: only strided tensors are supported, got layout ", *layout);
  CurrentDeviceScope guard(device_or_current(device));
  return at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false), "flagos: only CPU tensors can be pinned");
  return empty_strided_on(size, stride, c10::dtype_or_default(dtype), device_or_current(device));
}

size_t storage_bytes_needed(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  return at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.element_size(),
                                          t.storage_offset());
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef sym_size,
                          std::optional<at::MemoryFormat> memory_format) {
  auto size = C10_AS_INTARRAYREF_SLOW(sym_size);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  auto fmt = memory_format.value_or(at::MemoryFormat::Contiguous);
  if (fmt != at::MemoryFormat::Preserve) impl->empty_tensor_restride(fmt);
  size_t needed = storage_bytes_needed(self);
  if (needed > self.storage().nbytes()) {
    CurrentDeviceScope guard(self.device().index());
    resize_storage_bytes(self.storage(), needed);
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kFlagos, "flagos: set_ needs a flagos storage, got ",
              source.device());
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_sizes_and_strides(size, stride, offset);
  size_t needed = storage_bytes_needed(self);
  TORCH_CHECK(needed <= self.storage().nbytes(), "flagos: set_: a storage of ",
              self.storage().nbytes(), " bytes is too small for size ", size, " stride ", stride,
              " offset ", offset, " (needs ", needed, " bytes)");
  return self;
}

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                                      c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  std::vector<int64_t> strides;
  if (stride.empty()) {
    auto cs = c10::contiguous_strides(sizes);
    strides.assign(cs.begin(), cs.end());
  } else {
    auto s = C10_AS_INTARRAYREF_SLOW(stride);
    strides.assign(s.begin(), s.end());
  }
  return set_storage(self, std::move(source), offset.expect_int(), sizes, strides);
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.element_size());
  return set_storage(self, std::move(source), 0, {n}, {1});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& src) {
  if (self.is_same(src)) return self;
  return set_storage(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  CurrentDeviceScope guard(self.device().index());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), true);
  return set_storage(self, std::move(storage), 0, {0}, {1});
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "flagos: a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  // launches chosen by a value read from the device are no function of the call's metadata
  spoil_launch_recording("a value read from the device on the host (.item())");
  return read_for_host(self).item();
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return self;
  spoil_launch_recording();  // device work a launch-cache relaunch would not repeat
  auto device = self.device().index();
  if (host_addressable(device) && capture::current_stream_capturing(device)) {
    // Recorded on the stream, run at each replay (capture/host_tasks.h).
    capture::queue_host_task(device, "fill_", [alias = alias_as(self, c10::Device(c10::kCPU)),
                                               value]() mutable { alias.fill_(value); });
    return self;
  }
  if (host_addressable(device)) {
    sync_for_host_access(device);
    alias_as(self, c10::Device(c10::kCPU)).fill_(value);
    return self;
  }
  if (auto twin = device_twin(device)) {  // the twin's fill kernel, on the flagos stream
    TwinStreamGuard on_flagos_stream(*twin, current_stream(device));
    borrowed_alias(self, *twin).fill_(value);
    return self;
  }
  auto host = at::empty(self.sizes(), at::TensorOptions().dtype(self.scalar_type()));
  host.fill_(value);
  if (capture::current_stream_capturing(device)) {  // opaque memory: a recorded copy
    copy_constant_in_capture(host, self);
    return self;
  }
  copy_from(host, self, false);
  return self;
}

at::Tensor& zero_(at::Tensor& self) {
  if (self.numel() == 0) return self;
  spoil_launch_recording();  // device work a launch-cache relaunch would not repeat
  if (self.is_non_overlapping_and_dense()) {
    // One HAL memset over the span, queued on the current stream.
    auto device = self.device().index();
    const auto& hal = hal_of(device);
    auto [lo, hi] = byte_span(self);
    char* base = static_cast<char*>(self.storage().mutable_data()) + lo;
    static const std::string memset_name = "Memset";
    device_activity::Scope span(device_activity::Kind::Memset, memset_name, nullptr, device,
                                hi - lo);
    FLAGOS_HAL_CHECK(hal, hal.memset_async(base, 0, hi - lo,
                                           hal_stream(current_stream(device))));
    return self;
  }
  return fill_scalar(self, 0);
}

// Tensor.record_stream: the caching allocator must not reuse the block until the work
// queued on `stream` so far is done.
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kFlagos, "flagos: record_stream needs a flagos stream, got ",
              stream);
  record_data_ptr_on_stream(self.storage().data_ptr(), stream);
}

at::Tensor copy_from_op(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  return copy_from(self, dst, non_blocking);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  // The other view ops that torch gives a kernel per backend instead of a composite one.
  // Routed, they would reach the CPU fallback, which on opaque memory returns a copy that
  // autograd still takes for a view: writes through it would be lost.
  m.impl("unfold", at::native::unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("_copy_from", copy_from_op);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("zero_", zero_);
  m.impl("record_stream", record_stream);
}

void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes) {
  TORCH_CHECK(storage.resizable(), "flagos: trying to resize a storage that is not resizable");
  auto* impl = storage.unsafeGetStorageImpl();
  c10::DataPtr new_data = device_allocator()->allocate(new_bytes);
  size_t keep = std::min(new_bytes, impl->nbytes());
  if (keep > 0) {
    spoil_launch_recording();  // the kept bytes' copy: a relaunch would not repeat it
    auto device = storage.device().index();
    const auto& hal = hal_of(device);
    FLAGOS_HAL_CHECK(hal, hal.memcpy_async(new_data.get(), impl->data(), keep,
                                           FLAGOS_MEMCPY_DEVICE_TO_DEVICE,
                                           hal_stream(current_stream(device))));
  }
  impl->set_data_ptr_noswap(std::move(new_data));
  impl->set_nbytes(new_bytes);
}

}  // namespace flagos

#include "aten/alias.h"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <c10/core/TensorImpl.h>

#include <array>

#include "aten/result_adoption.h"
#include "capture/capture_state.h"
#include "runtime/stream.h"

namespace flagos {

namespace {
// The alias's DataPtr context is the flagos StorageImpl itself, holding one reference
// (taken in alias_as, dropped here): no allocation of its own on the hot path.
void release_alias(void* ctx) {
  c10::intrusive_ptr<c10::StorageImpl>::reclaim(static_cast<c10::StorageImpl*>(ctx));
}
}  // namespace

namespace {
void borrowed(void*) {}

at::Tensor make_alias(const at::Tensor& t, c10::Device twin, bool owning) {
  const c10::Storage& storage = t.storage();
  auto* impl = storage.unsafeGetStorageImpl();
  c10::DataPtr dp = owning
      ? c10::DataPtr(storage.mutable_data(),
                     c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(impl).release(),
                     &release_alias, twin)
      : c10::DataPtr(storage.mutable_data(), impl, &borrowed, twin);
  c10::Allocator* twin_alloc = c10::GetAllocator(twin.type());
  c10::Storage alias_storage(c10::Storage::use_byte_size_t(), storage.sym_nbytes(), std::move(dp),
                             twin_alloc, /*resizable=*/true);
  return alias_on(alias_storage, t);
}

// Whether `cached` is an exact alias of `t` on `twin`, held by nobody but the cache (and,
// for an alias a foreign kernel got as a Python tensor, by that Python object, which
// nothing else references: it is reused with the alias, see result_adoption.h).
bool reusable(const at::Tensor& cached, const at::Tensor& t, c10::Device twin) {
  if (!cached.defined() || !only_reference(cached.use_count(), cached.unsafeGetTensorImpl()) ||
      !only_reference(cached.storage().use_count(), cached.storage().unsafeGetStorageImpl())) {
    return false;
  }
  const c10::Storage& a = cached.storage();
  const c10::Storage& s = t.storage();
  return a.data_ptr().get_context() == s.unsafeGetStorageImpl() && a.data() == s.data() &&
         a.nbytes() == s.nbytes() && cached.device() == twin && cached.dtype() == t.dtype() &&
         cached.storage_offset() == t.storage_offset() && same_ints(cached.sizes(), t.sizes()) &&
         same_ints(cached.strides(), t.strides()) && !cached.is_conj() && !cached.is_neg() &&
         cached.unsafeGetTensorImpl()->is_wrapped_number() ==
             t.unsafeGetTensorImpl()->is_wrapped_number();
}
}  // namespace

at::Tensor alias_as(const at::Tensor& t, c10::Device twin) { return make_alias(t, twin, true); }

at::Tensor alias_on(const c10::Storage& twin_storage, const at::Tensor& t) {
  auto key = c10::computeDispatchKey(t.scalar_type(), t.layout(), twin_storage.device());
  auto out = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(twin_storage),
                                                      c10::DispatchKeySet(key), t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) out.unsafeGetTensorImpl()->set_wrapped_number(true);
  return out;
}

at::Tensor borrowed_alias(const at::Tensor& t, c10::Device twin) {
  // A small per-thread cache: the same tensors come back op after op (weights, running
  // activations), and making an alias costs two allocations. Cached aliases do not own
  // the flagos storage (no memory is kept alive by the cache); one is reused only when
  // nothing else holds it and it still describes exactly t's bytes and geometry.
  thread_local std::array<at::Tensor, 64> cache;
  auto key = reinterpret_cast<uintptr_t>(t.storage().unsafeGetStorageImpl()) >> 4;
  key ^= static_cast<uintptr_t>(t.storage_offset()) * 0x9e3779b1u ^ t.dim();
  at::Tensor& slot = cache[key % cache.size()];
  if (!reusable(slot, t, twin)) slot = make_alias(t, twin, false);
  return slot;
}

at::Tensor flagos_view_of(const at::Tensor& original, const at::Tensor& view) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(original.storage()), original.key_set(), view.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(view.sizes(), view.strides(),
                                                   view.storage_offset());
  return out;
}

void sync_for_host_access(c10::DeviceIndex device) {
  if (C10_UNLIKELY(capture::current_stream_capturing(device))) {
    capture::refuse("reading or writing flagos:" + std::to_string(device) +
                        " memory on the host (a CPU kernel, a host copy, .item(), print)",
                    device);
  }
  synchronize_stream(current_stream(device));
}

}  // namespace flagos

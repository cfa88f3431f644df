// What adopting a kernel's fresh result as a flagos tensor takes, on any twin: the result
// may give its bytes away only if nothing else holds it, and once its storage's DataPtr is
// flagos memory of `device`, the tensor becomes a flagos tensor in place.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <torch/version.h>

#include <typeinfo>

#include "runtime/allocator.h"

namespace flagos {

// Whether `use_count` references to a TensorImpl or StorageImpl mean that nothing but the
// holder of one of them uses it. A result made in Python (a foreign kernel's torch.empty,
// engines/python/foreign_kernels.h) has a second one: since torch 2.10 the Python object of a
// tensor (or of a storage, which Triton's interpreter makes) holds a strong reference to
// it, and the object is kept alive while other C++ references exist. When the object's
// only reference is that keep-alive, nothing in Python can reach it any more. (Before 2.10
// such an object held no reference once Python dropped it.)
template <class Impl>
inline bool only_reference(size_t use_count, const Impl* impl) {
  if (use_count == 1) return true;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)
  return use_count == 2 && impl->pyobj_slot()->has_unique_reference();
#else
  return false;
#endif
}

// Nothing else holds `t` or its storage (no cache, no second return, no weak reference, no
// Python reference), it is a plain TensorImpl, and not a lazy conj/neg result (those are
// resolved by the copy path).
inline bool result_is_adoptable(const at::Tensor& t) {
  return t.defined() && t.has_storage() && only_reference(t.use_count(), t.unsafeGetTensorImpl()) &&
         t.weak_use_count() == 1 &&
         only_reference(t.storage().use_count(), t.storage().unsafeGetStorageImpl()) &&
         !t.is_conj() && !t.is_neg() &&
         typeid(*t.unsafeGetTensorImpl()) == typeid(c10::TensorImpl);
}

// `t`'s storage already holds a flagos DataPtr of `device`: the storage takes the flagos
// allocator, and the tensor follows its storage's device and takes flagos' backend keys,
// as `tensor.data = other` does across devices.
inline void become_flagos_tensor(const at::Tensor& t, c10::DeviceIndex device) {
  t.storage().unsafeGetStorageImpl()->set_allocator(device_allocator());
  c10::TensorImpl* tensor = t.unsafeGetTensorImpl();
  tensor->set_storage_keep_dtype(t.storage());
  tensor->_change_backend_component_keys(c10::Device(c10::DeviceType::PrivateUse1, device));
}

}  // namespace flagos

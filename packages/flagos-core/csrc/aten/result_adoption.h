// What adopting a kernel's fresh result as a flagos tensor takes, on any twin: the result
// may give its bytes away only if nothing else holds it, and once its storage's DataPtr is
// flagos memory of `device`, the tensor becomes a flagos tensor in place.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/StorageImpl.h>

#include <typeinfo>

#include "runtime/allocator.h"

namespace flagos {

// Nothing else holds `t` or its storage (no cache, no second return, no weak reference; a
// Python object would hold a reference too), it is a plain TensorImpl, and not a lazy
// conj/neg result (those are resolved by the copy path).
inline bool result_is_adoptable(const at::Tensor& t) {
  return t.defined() && t.has_storage() && t.use_count() == 1 && t.weak_use_count() == 1 &&
         t.storage().use_count() == 1 && !t.is_conj() && !t.is_neg() &&
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

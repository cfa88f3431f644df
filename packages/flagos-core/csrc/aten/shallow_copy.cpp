// _has_compatible_shallow_copy_type for flagos: a dense flagos tensor and a dense CPU/CUDA
// (or flagos) tensor are compatible, as CPU and CUDA tensors are with each other.
//
// nn.Module.to()/_apply() and `param.data = t` ask this before swapping a parameter's data
// in place. c10's built-in answer lists CPU, CUDA, MPS, HIP, XPU, HPU, MTIA but not
// PrivateUse1, so `model.to("flagos")` used to create new Parameter objects, which unties
// tied weights (GPT-2's embedding/LM head) and orphans optimizer state. The op dispatches on
// the union of both tensors' keys, so the flagos kernel (at the autograd key, where the
// composite kernel would otherwise answer) sees every pair that has a flagos tensor in it.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace flagos {
namespace {

bool dense_strided(const at::Tensor& t) {
  if (t.layout() != at::kStrided || t.is_quantized() || t.is_nested()) return false;
  auto type = t.device().type();
  return type == c10::DeviceType::PrivateUse1 || type == c10::DeviceType::CPU ||
         type == c10::DeviceType::CUDA;
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (dense_strided(self) && dense_strided(from) &&
      !self.unsafeGetTensorImpl()->is_wrapped_number() &&
      typeid(*self.unsafeGetTensorImpl()) == typeid(c10::TensorImpl) &&
      typeid(*from.unsafeGetTensorImpl()) == typeid(c10::TensorImpl)) {
    return true;
  }
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

}  // namespace flagos

// Convolution specifics of the engines: the native op a PrivateUse1 convolution hook
// stands for, and the layout torch's shape tracking predicts for its results.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>
#include <vector>

namespace flagos {

// A PrivateUse1 backend receives some ops in place of the native ones (convolution goes to
// the *_overrideable hooks); the twin/CPU kernels exist only for the native op. Rewrites the
// stack for the native op and returns it (`op` itself for every other op).
const c10::OperatorHandle& native_equivalent(const c10::OperatorHandle& op,
                                             torch::jit::Stack* stack);

// aten::native_batch_norm, which updates running_mean/var without its schema saying so.
bool is_native_batch_norm(const c10::OperatorHandle& op);

// The layout torch's shape tracking predicts for the results of a flagos convolution.
//
// torch.compile traces with fake tensors; for aten::convolution / convolution_backward the
// fake kernel (torch/_subclasses/fake_impls.py `conv`, over the meta kernels of
// torch/_meta_registrations.py) asks at::native::select_conv_backend for the device's conv
// backend and lays the results out in at::native::_determine_backend_memory_format(input,
// weight, backend); Inductor checks the strides of every extern kernel's result against
// that prediction. For a PrivateUse1 tensor the backend would be `Overrideable` (contiguous
// results whatever the inputs), while the twin's kernel (mkldnn on the CPU, cudnn on CUDA)
// keeps channels_last inputs channels_last: every channels_last convolution would then be
// re-laid out, and Inductor's layout optimization would convert back and forth. So both
// sides choose the backend as the twin would: here on twin aliases of the arguments,
// in flagos_compile by a patch of torch._C._select_conv_backend for flagos fake tensors.
// Results then keep the twin kernel's layout (no copy), as native convolutions do.
//
// Mirrored (torch 2.13):
//  - mem_fmt = _determine_backend_memory_format(input, weight, select_conv_backend(...)),
//    for 1-d convolutions on the inputs unsqueezed at dim 2;
//  - convolution: result = empty(sizes).to(mem_fmt) (3-d with channels_last: through an
//    unsqueeze at dim 2);
//  - convolution_backward: grad_input/grad_weight = empty(sizes).to(fmt0).to(mem_fmt), fmt0
//    being channels_last(_3d) if input or weight suggests it; grad_bias = empty(sizes).
class ConvLayout {
 public:
  // Reads the arguments of the native op (aten::convolution or aten::convolution_backward)
  // from the stack while they are still flagos tensors. nullopt: not a convolution, or
  // arguments the prediction does not cover (the op then keeps the kernel's layout).
  static std::optional<ConvLayout> predict(const c10::OperatorHandle& op,
                                           const torch::jit::Stack& stack);

  // The predicted strides of result `i` given its sizes (nullopt: keep the kernel's).
  std::optional<std::vector<int64_t>> strides(size_t i, at::IntArrayRef sizes) const;

 private:
  bool backward_ = false;
  at::MemoryFormat fmt_ = at::MemoryFormat::Contiguous;       // the fake kernel's mem_fmt
  at::MemoryFormat meta_fmt_ = at::MemoryFormat::Contiguous;  // the backward meta kernel's
};

}  // namespace flagos

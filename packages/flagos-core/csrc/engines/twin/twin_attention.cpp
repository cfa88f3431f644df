#include "engines/twin/twin_attention.h"

#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorOptions.h>

#include "engines/twin/twin_engine.h"
#include "runtime/twin.h"

namespace flagos {
namespace {

struct AttentionOps {
  c10::OperatorHandle overrideable, overrideable_backward, flash, flash_backward;
};
const AttentionOps& attention_ops() {
  static const AttentionOps ops = [] {
    auto& d = c10::Dispatcher::singleton();
    return AttentionOps{
        d.findSchemaOrThrow("aten::_scaled_dot_product_fused_attention_overrideable", ""),
        d.findSchemaOrThrow("aten::_scaled_dot_product_fused_attention_overrideable_backward", ""),
        d.findSchemaOrThrow("aten::_scaled_dot_product_flash_attention", ""),
        d.findSchemaOrThrow("aten::_scaled_dot_product_flash_attention_backward", "")};
  }();
  return ops;
}

bool has_kernel_on(const c10::OperatorHandle& op, c10::DeviceType type) {
  return op.hasKernelForDispatchKey(c10::computeDispatchKey(std::nullopt, std::nullopt, c10::Device(type)));
}

// The overrideable op's results from flash attention's: the same nine, except that flash
// attention without dropout leaves its philox seed and offset as host tensors, which are
// not results a device call can map back; they are never read without dropout.
void push_forward(torch::jit::Stack* stack, const at::Tensor& q,
                  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt,
                             c10::SymInt, at::Tensor, at::Tensor, at::Tensor> r) {
  auto on_twin = [&](const at::Tensor& t) {
    return !t.defined() || t.device() == q.device() ? t : at::empty({}, q.options().dtype(at::kLong));
  };
  auto& [out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug] = r;
  torch::jit::push(*stack, out, lse, cum_q, cum_k, max_q, max_k, on_twin(seed), on_twin(offset),
                   debug);
}

bool flash_forward(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto args = torch::jit::pop(*stack, 8);
  const at::Tensor& q = args[0].toTensor();
  TORCH_CHECK(args[3].isNone() || !args[3].toTensor().defined(),
              "flagos: the twin's flash attention takes no attention mask");
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  push_forward(stack, q,
               at::_scaled_dot_product_flash_attention(
                   q, args[1].toTensor(), args[2].toTensor(), args[4].toDouble(), args[5].toBool(),
                   args[6].toBool(), args[7].toOptional<double>()));
  return true;
}

bool flash_backward(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto a = torch::jit::pop(*stack, 17);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  at::Tensor grad_out = a[0].toTensor();
  auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_backward_symint(
      grad_out.stride(-1) == 1 ? grad_out : grad_out.contiguous(), a[1].toTensor(),
      a[2].toTensor(), a[3].toTensor(), a[6].toTensor(), a[7].toTensor(), a[8].toTensor(),
      a[9].toTensor(), a[10].toSymInt(), a[11].toSymInt(), a[12].toDouble(), a[13].toBool(),
      a[14].toTensor(), a[15].toTensor(), a[16].toOptional<double>());
  torch::jit::push(*stack, gq, gk, gv, at::Tensor());
  return true;
}

}  // namespace

bool twin_has_kernel(const c10::OperatorHandle& op, c10::DeviceIndex device) {
  auto twin = twin_device_type(device);
  return twin && *twin != c10::DeviceType::CPU && has_kernel_on(op, *twin);
}

bool twin_takes_flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                double dropout_p, bool is_causal, std::optional<double> scale,
                                bool enable_gqa) {
  auto device = q.device().index();
  auto twin = device_twin(device);
  if (!twin || twin->type() == c10::DeviceType::CPU || dropout_p != 0.0 || q.dim() != 4 ||
      q.size(-1) % 8 != 0 || !has_kernel_on(attention_ops().flash, twin->type()) ||
      !has_kernel_on(attention_ops().flash_backward, twin->type()))
    return false;
  c10::DeviceGuard guard(*twin);  // the twin's choice reads its current device's properties
  int64_t choice = at::_fused_sdp_choice(borrowed_alias(q, *twin), borrowed_alias(k, *twin),
                                         borrowed_alias(v, *twin), std::nullopt, dropout_p,
                                         is_causal, scale, enable_gqa);
  return choice == static_cast<int64_t>(at::SDPBackend::flash_attention);
}

bool run_twin_attention(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                        c10::DeviceIndex device, c10::DeviceType twin) {
  if (op == attention_ops().overrideable) return TwinCall(device, twin).run_with(op, stack, flash_forward);
  if (op == attention_ops().overrideable_backward)
    return TwinCall(device, twin).run_with(op, stack, flash_backward);
  return false;
}

}  // namespace flagos

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

// An alias for asking the twin: it requires grad where `t` does, since the choice depends
// on it (some kernels run forward only).
at::Tensor asking_alias(const at::Tensor& t, c10::Device twin) {
  at::Tensor a = alias_as(t, twin);
  if (t.requires_grad()) a.set_requires_grad(true);
  return a;
}

// The overrideable op's arguments are flash attention's but for the mask (none here).
bool flash_forward(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto args = torch::jit::pop(*stack, 8);
  TORCH_CHECK(args[3].isNone() || !args[3].toTensor().defined(),
              "flagos: the twin's flash attention takes no attention mask");
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  auto r = at::_scaled_dot_product_flash_attention(
      args[0].toTensor(), args[1].toTensor(), args[2].toTensor(), args[4].toDouble(),
      args[5].toBool(), args[6].toBool(), args[7].toOptional<double>());
  auto& [out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug] = r;
  torch::jit::push(*stack, out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug);
  return true;
}

bool flash_backward(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto a = torch::jit::pop(*stack, 17);  // a[4], a[5]: the bias (none) and the grad mask
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_backward_symint(
      a[0].toTensor(), a[1].toTensor(), a[2].toTensor(), a[3].toTensor(), a[6].toTensor(),
      a[7].toTensor(), a[8].toTensor(), a[9].toTensor(), a[10].toSymInt(), a[11].toSymInt(),
      a[12].toDouble(), a[13].toBool(), a[14].toTensor(), a[15].toTensor(),
      a[16].toOptional<double>());
  torch::jit::push(*stack, gq, gk, gv, at::Tensor());
  return true;
}

}  // namespace

bool traced(const at::Tensor& t) {
  return t.key_set().has_any(c10::DispatchKeySet({c10::DispatchKey::Python,
                                                  c10::DispatchKey::PythonTLSSnapshot,
                                                  c10::DispatchKey::Functionalize}));
}

bool twin_has_kernel(const c10::OperatorHandle& op, c10::DeviceIndex device) {
  auto twin = twin_device_type(device);
  return twin && *twin != c10::DeviceType::CPU && has_kernel_on(op, *twin);
}

bool twin_has_flash_attention(c10::DeviceIndex device) {
  return twin_has_kernel(attention_ops().flash, device) &&
         twin_has_kernel(attention_ops().flash_backward, device);
}

int64_t twin_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& mask, double dropout_p, bool is_causal,
                        std::optional<double> scale, bool enable_gqa) {
  auto twin = device_twin(q.device().index());
  if (!twin || twin->type() == c10::DeviceType::CPU || traced(q) || traced(k) || traced(v) ||
      (mask.defined() && traced(mask)))
    return -1;
  try {
    c10::DeviceGuard guard(*twin);  // the twin's choice reads its current device's properties
    return at::_fused_sdp_choice(asking_alias(q, *twin), asking_alias(k, *twin),
                                 asking_alias(v, *twin),
                                 mask.defined() ? std::optional<at::Tensor>(alias_as(mask, *twin))
                                                : std::nullopt,
                                 dropout_p, is_causal, scale, enable_gqa);
  } catch (const c10::Error&) {  // every backend the twin has turned off (sdpa_kernel)
    return -1;
  }
}

bool run_twin_attention(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                        c10::DeviceIndex device, c10::DeviceType twin) {
  if (op == attention_ops().overrideable) return TwinCall(device, twin).run_with(op, stack, flash_forward);
  if (op == attention_ops().overrideable_backward)
    return TwinCall(device, twin).run_with(op, stack, flash_backward);
  return false;
}

}  // namespace flagos

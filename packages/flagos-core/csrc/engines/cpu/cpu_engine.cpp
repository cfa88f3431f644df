// The CPU fallback engine (the `cpu` provider): every op, on any HAL. On host-addressable
// memory it is the twin engine on the CPU (zero-copy aliases); on opaque memory it copies
// the inputs to the CPU, runs the CPU kernel and copies results and mutated arguments back
// (PyTorch's cpu_fallback).
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/empty_strided.h>

#include "engines/cpu/cpu_engine.h"
#include "engines/twin/twin_engine.h"
#include "router/dispatcher.h"

namespace flagos {
namespace {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

// at::native::cpu_fallback moves its arguments to the CPU with _to_copy and writes results
// back with copy_. Once a kernel library serves those two ops, they are routed as
// themselves (routed_as_themselves.h); reaching the CPU fallback on opaque memory they
// would call it again, each call one level deeper, until the stack ran out (a crash, not
// an error). Their composite kernels are written in the runtime's own allocation and copy
// ops, which move bytes through the HAL: that is the CPU fallback's answer for them.
bool moves_fallback_arguments(const c10::OperatorHandle& op) {
  static const c10::OperatorName* to_copy =
      &c10::Dispatcher::singleton().findSchemaOrThrow("aten::_to_copy", "").operator_name();
  static const c10::OperatorName* copy =
      &c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "").operator_name();
  const c10::OperatorName* name = &op.operator_name();
  return name == to_copy || name == copy;
}

// Whether the first tensor argument (or the first tensor of a list argument) is in host
// memory while another is flagos memory.
bool first_tensor_on_host(const torch::jit::Stack& stack, size_t num_args) {
  std::optional<bool> first_on_host;
  bool flagos = any_tensor_argument(stack, num_args, [&](const at::Tensor& t) {
    if (!t.defined()) return false;
    if (!first_on_host) first_on_host = t.is_cpu();
    return is_flagos(t);
  });
  return flagos && first_on_host.value_or(false);
}

void run_cpu_kernel(const c10::OperatorHandle& requested, torch::jit::Stack* stack,
                    c10::DeviceIndex device) {
  if (host_addressable(device)) {
    TwinCall(device, c10::DeviceType::CPU).run(requested, stack);
    return;
  }
  if (moves_fallback_arguments(requested)) {
    requested.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd, *stack);
    return;
  }
  // Opaque memory: copy in, run on the CPU, copy back (mutated args and results).
  const c10::OperatorHandle& op = native_equivalent(requested, stack);
  auto conv_layout = ConvLayout::predict(op, *stack);
  const auto& arguments = op.schema().arguments();
  size_t n = arguments.size();
  size_t base = stack->size() - n;
  // at::native::cpu_fallback puts results on the device of the first tensor argument: a
  // CPU scalar tensor first, which ATen allows beside flagos tensors
  // (torch.where(torch.tensor(True), x, y)), would leave them in host memory.
  bool device_arg = first_tensor_on_host(*stack, n);
  // at::native::cpu_fallback writes back only the arguments a schema marks mutable and
  // not optional; native_batch_norm updates running_mean/var (arguments 3, 4) without saying
  // so. Hand it CPU copies of those and write them back here.
  std::vector<std::pair<at::Tensor, at::Tensor>> written_back;
  bool batch_norm = is_native_batch_norm(op);
  for (size_t i = 0; i < n; ++i) {
    auto& v = (*stack)[base + i];
    const auto& alias = arguments[i].alias_info();
    bool optional_mutable = alias && alias->isWrite() &&
                            arguments[i].type()->kind() == c10::TypeKind::OptionalType;
    bool undeclared = batch_norm && (i == 3 || i == 4);
    if (v.isTensor() && (optional_mutable || undeclared) && is_flagos(v.toTensor())) {
      at::Tensor orig = v.toTensor();
      at::Tensor host = orig.cpu();
      written_back.emplace_back(orig, host);
      v = host;
      continue;
    }
    if (v.isDevice() && v.toDevice().type() == kFlagos) {
      v = c10::Device(c10::kCPU);
      device_arg = true;
    } else if (is_optional_generator(arguments[i])) {
      auto gen = twin_generator_for(v.isNone() ? std::nullopt : std::optional(v.toGenerator()),
                                    device, c10::DeviceType::CPU);
      v = gen ? c10::IValue(*gen) : c10::IValue();
    }
  }
  try {
    std::optional<DefaultGeneratorLent> rng;
    if (draws_from_default_generator(op)) rng.emplace(device, c10::Device(c10::kCPU));
    at::native::cpu_fallback(op, stack);
  } catch (const c10::Error& e) {
    // A sparse/quantized CPU result cannot move to flagos: say so plainly.
    std::string what = e.what_without_backtrace();
    if (what.find("Sparseflagos") != std::string::npos ||
        what.find("Quantizedflagos") != std::string::npos ||
        what.find("SparseCsrflagos") != std::string::npos) {
      TORCH_CHECK_NOT_IMPLEMENTED(false, "flagos: ", op_full_name(op),
          " returns a sparse or quantized tensor; flagos supports only strided, non-quantized "
          "tensors (layout not supported)");
    }
    throw;
  }
  for (auto& [orig, host] : written_back) {
    if (!orig.sizes().equals(host.sizes())) orig.resize_(host.sizes());
    orig.copy_(host);
  }
  if (conv_layout) {
    // A convolution's results take the strides the fake kernel predicts (see ConvLayout).
    const auto& returns = op.schema().returns();
    size_t first = stack->size() - returns.size();
    for (size_t i = first; i < stack->size(); ++i) {
      auto& v = (*stack)[i];
      if (!v.isTensor() || !is_flagos(v.toTensor())) continue;
      const at::Tensor& r = v.toTensor();
      auto want = conv_layout->strides(i - first, r.sizes());
      if (!want || r.strides().equals(*want)) continue;
      at::Tensor out = at::empty_strided(r.sizes(), *want, r.options());
      out.copy_(r);
      v = out;
    }
  }
  if (!device_arg) return;
  // A factory op asked for flagos, or a call whose first tensor was a CPU scalar: its CPU
  // results move there.
  const auto& returns = op.schema().returns();
  for (size_t i = stack->size() - returns.size(); i < stack->size(); ++i) {
    auto& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().is_cpu()) {
      v = v.toTensor().to(c10::Device(kFlagos, device));
    }
  }
}
}  // namespace

void run_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device) {
  auto run = [&](torch::jit::Stack* s) { run_cpu_kernel(op, s, device); };
  if (!run_with_cpu_dtype_gaps_closed(op, stack, run)) run(stack);
}

}  // namespace flagos

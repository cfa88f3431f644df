#include "router/routed_as_themselves.h"

#include <torch/library.h>

#include <memory>
#include <mutex>

#include "router/dispatcher.h"

namespace flagos {

namespace {

// Where the call's result lives: the value of a "device" argument when the call names a
// device other than flagos (x.to("cpu") is _to_copy(x, device=cpu), zeros_like(x,
// device="cpu")). Such a call leaves the flagos device, which no provider's kernel of the
// op does: it takes the op's composite kernel, as without this registration.
bool leaves_flagos(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& args = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].name() != "device") continue;
    const auto& v = stack[stack.size() - args.size() + i];
    return v.isDevice() && v.toDevice().type() != c10::DeviceType::PrivateUse1;
  }
  return false;
}

void run_routed_on_flagos(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                          torch::jit::Stack* stack) {
  if (!leaves_flagos(op, *stack)) return run_routed(op, keys, stack);
  op.callBoxedForDispatchKey(
      op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)
          ? c10::DispatchKey::CompositeExplicitAutograd
          : c10::DispatchKey::CompositeExplicitAutogradNonFunctional,
      *stack);
}

bool has_device_argument(const c10::FunctionSchema& schema) {
  for (const auto& a : schema.arguments())
    if (a.name() == "device") return true;
  return false;
}

}  // namespace

std::vector<std::string> route_ops_as_themselves(const std::vector<std::string>& names) {
  static std::mutex mutex;
  // The registrations live as long as the process (a Library's destructor would undo them).
  static auto* libraries = new std::vector<std::unique_ptr<torch::Library>>();
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<std::string> registered;
  for (const auto& full : names) {
    auto sep = full.find("::");
    if (sep == std::string::npos || full.compare(0, sep, "aten") != 0) continue;
    std::string rest = full.substr(sep + 2);
    auto dot = rest.find('.');
    std::string name = dot == std::string::npos ? rest : rest.substr(0, dot);
    std::string overload = dot == std::string::npos ? "" : rest.substr(dot + 1);
    if (overload == "default") overload.clear();
    auto op = c10::Dispatcher::singleton().findOp(c10::OperatorName("aten::" + name, overload));
    if (!op || !op->hasSchema()) continue;
    bool composite =
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
    if (op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) || !composite) continue;
    std::string key = overload.empty() ? name : name + "." + overload;
    if (libraries->empty()) {
      libraries->push_back(std::make_unique<torch::Library>(
          torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__));
    }
    libraries->back()->impl(
        key.c_str(), has_device_argument(op->schema())
                         ? torch::CppFunction::makeFromBoxedFunction<&run_routed_on_flagos>()
                         : torch::CppFunction::makeFromBoxedFunction<&run_routed>());
    note_routed_kernel_op(key);
    registered.push_back(full);
  }
  return registered;
}

}  // namespace flagos

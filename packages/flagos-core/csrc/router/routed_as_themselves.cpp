#include "router/routed_as_themselves.h"

#include <torch/library.h>

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "router/dispatcher.h"

namespace flagos {

namespace {

// The ops whose whole work is copying their tensor argument: for them a 0-dim tensor on
// another device is data to move (torch.tensor(0.5).to("flagos"), x.copy_(scalar)), not a
// scalar operand as in x * torch.tensor(0.5).
bool copies_its_input(const c10::OperatorHandle& op) {
  const auto& name = op.schema().name();
  return name == "aten::_to_copy" || name == "aten::copy_" || name == "aten::copy";
}

// A call that moves data between its flagos device and another device: a "device"
// argument naming another device for the result (x.cpu() is _to_copy(x, device=cpu);
// a.to("flagos:1")), or a tensor argument on another device that is more than a 0-dim
// scalar, or any one of a copy (copy_ from or into the host). No provider's kernel of the
// op does that; such a call takes the op's composite kernel, as without this
// registration, and with it the runtime's own copies (non-blocking, stream-ordered,
// between devices; a Python number copied in during a capture is a constant of the graph).
bool leaves_flagos(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& args = op.schema().arguments();
  size_t base = stack.size() - args.size();
  std::optional<c10::Device> home;  // the device of the call's first flagos tensor
  for (size_t i = 0; i < args.size() && !home; ++i) {
    const auto& v = stack[base + i];
    if (v.isTensor() && v.toTensor().defined() &&
        v.toTensor().device().type() == c10::DeviceType::PrivateUse1)
      home = v.toTensor().device();
  }
  auto elsewhere = [&](c10::Device d) {
    return d.type() != c10::DeviceType::PrivateUse1 ||
           (home && d.has_index() && d.index() != home->index());
  };
  bool copy = copies_its_input(op);
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& v = stack[base + i];
    if (v.isDevice() && elsewhere(v.toDevice())) return true;
    if (v.isTensor()) {
      const auto& t = v.toTensor();
      if (t.defined() && (t.dim() > 0 || copy) && elsewhere(t.device())) return true;
    }
  }
  return false;
}

void run_composite(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.callBoxedForDispatchKey(
      op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)
          ? c10::DispatchKey::CompositeExplicitAutograd
          : c10::DispatchKey::CompositeExplicitAutogradNonFunctional,
      *stack);
}

// A call no provider before the CPU fallback accepts takes the composite kernel, as it
// would without this registration: its parts go down their own routes, where a device
// kernel may serve them (torch.full is empty and fill_), and a graph capture can record
// them; the fallback would compute the whole op on the host.
void run_routed_on_flagos(const c10::OperatorHandle& op, c10::DispatchKeySet,
                          torch::jit::Stack* stack) {
  if (leaves_flagos(op, *stack) || !run_routed_before_cpu_fallback(op, stack)) {
    run_composite(op, stack);
  }
}

std::mutex g_mutex;
std::unordered_set<std::string>& routed_names() {  // "aten::full", "aten::add.Tensor"
  static auto* names = new std::unordered_set<std::string>();
  return *names;
}

}  // namespace

bool routed_as_itself(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return routed_names().count(name) > 0;
}

std::vector<std::string> route_ops_as_themselves(const std::vector<std::string>& names) {
  // The registrations live as long as the process (a Library's destructor would undo them).
  static auto* libraries = new std::vector<std::unique_ptr<torch::Library>>();
  std::lock_guard<std::mutex> lock(g_mutex);
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
    libraries->back()->impl(key.c_str(),
                            torch::CppFunction::makeFromBoxedFunction<&run_routed_on_flagos>());
    note_routed_kernel_op(key);
    routed_names().insert("aten::" + key);
    registered.push_back(full);
  }
  return registered;
}

}  // namespace flagos

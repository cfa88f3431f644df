#include "router/routed_as_themselves.h"

#include <torch/library.h>

#include <memory>
#include <mutex>

#include "router/dispatcher.h"

namespace flagos {

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
    libraries->back()->impl(key.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_routed>());
    note_routed_kernel_op(key);
    registered.push_back(full);
  }
  return registered;
}

}  // namespace flagos

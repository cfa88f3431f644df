// The flagos dispatcher: every ATen op on flagos that has no runtime kernel arrives at
// one boxed fallback, which sends it down the op's routing chain of providers.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace flagos {

// How a provider runs an op. CPU: the CPU-fallback engine; TWIN: zero-copy aliases on the
// HAL's native twin device; PYTHON: a Python callable (called with the GIL).
enum class EngineKind { CPU, TWIN, PYTHON };

// Registers (or replaces) a provider by name. For PYTHON, `py_callable` is a borrowed
// PyObject* the dispatcher keeps a reference to: fn(op_name, args, kwargs) -> result or
// NotImplemented (decline).
void register_provider(const std::string& name, EngineKind kind, void* py_callable = nullptr);
std::vector<std::string> registered_providers();

// Routing table changes: every cached route is re-resolved on its next call.
void bump_routing_version();
uint64_t routing_version();
// resolver(op_name, device_index) -> provider names; called with the GIL.
void set_resolver(void* py_callable);

// (op, provider, calls, total_ns, declined)
std::vector<std::tuple<std::string, std::string, uint64_t, uint64_t, uint64_t>> routing_stats();
void reset_routing_stats();

// Engines, used by the providers and directly by tests.
void run_twin(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device);
void run_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device);
std::string op_full_name(const c10::OperatorHandle& op);

}  // namespace flagos

// The flagos dispatcher: every ATen op on flagos that has no runtime kernel arrives at
// one boxed fallback, which sends it down the op's routing chain of providers.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace flagos {

// How a provider runs an op. CPU: the CPU-fallback engine; TWIN: zero-copy aliases on the
// HAL's native twin device; PYTHON: a Python callable (called with the GIL); FOREIGN: a
// foreign library's Python kernels run on twin aliases (engines/python/foreign_kernels.h);
// EXTERNAL: a C++ engine of another shared library (include/flagos/provider_engine.h),
// without the GIL.
enum class EngineKind { CPU, TWIN, PYTHON, FOREIGN, EXTERNAL };

// An EXTERNAL provider's engine: run(ctx, op, stack, device) -> ran (true) or declined.
struct ExternalEngine {
  bool (*run)(void* ctx, const c10::OperatorHandle& op, torch::jit::Stack* stack,
              c10::DeviceIndex device) = nullptr;
  void* ctx = nullptr;
};
// (engines/external/external_engine.h checks what a package hands over, then calls this.)
void register_external_provider(const std::string& name, ExternalEngine engine);

// Registers (or replaces) a provider by name. For PYTHON, `py_callable` is a borrowed
// PyObject* the dispatcher keeps a reference to: fn(op_name, args, kwargs) -> result or
// NotImplemented (decline). For FOREIGN it is the kernel resolver: fn(op_name) -> kernel
// or None.
void register_provider(const std::string& name, EngineKind kind, void* py_callable = nullptr);
// A Python provider that wraps the rest of its chain (shadow verification): it sees each
// call first and declines or serves it by running the providers after it. Hot ops' fast
// kernels treat a route that starts with wrappers as the route after them would be
// treated when that starts with a FOREIGN provider (the op arrives as itself).
void register_wrapper_provider(const std::string& name, void* py_callable);
// Whether provider `name` may run while the current stream captures a graph: all its
// work queued on that stream, the same work on every call (capture/capture_state.h).
// Defaults: the twin, foreign and external engines yes, the CPU fallback and Python
// providers no. Throws for an unregistered name.
void set_provider_capture_safe(const std::string& name, bool safe);
bool provider_capture_safe(const std::string& name);
// The ops of Python provider `name` whose calls the launch cache relaunches from C++ on a
// repeated key (engines/launch/launch_cache.h, ProviderLaunches); empty: none. Throws for
// an unregistered name or another kind of provider.
void set_provider_replayable(const std::string& name, const std::vector<std::string>& ops);
// Whether random ops (tagged nondeterministic_seeded) through provider `name` may be
// captured on flagos:`device`: only where each replay draws anew (a CPU twin's host tasks).
bool provider_captures_random_ops(const std::string& name, c10::DeviceIndex device);
std::vector<std::string> registered_providers();
// The names engines go by in explain output and docs: "cpu fallback", "twin", "python",
// "foreign kernels", "external".
const char* engine_name(EngineKind kind);
// (provider, its engine's name; "wrapper" for a wrapper provider) for every provider.
std::vector<std::pair<std::string, std::string>> provider_engines();

// Routing table changes: every cached route is re-resolved on its next call.
void bump_routing_version();
uint64_t routing_version();
// resolver(op_name, device_index) -> provider names; called with the GIL.
void set_resolver(void* py_callable);

// (op, provider, calls, total_ns, declined)
std::vector<std::tuple<std::string, std::string, uint64_t, uint64_t, uint64_t>> routing_stats();
void reset_routing_stats();

// Runs `op` on `stack` with provider `name` alone (no chain, no CPU fallback after it):
// true when it ran, false (stack untouched) when it declined. The call is counted under
// (op, name) in routing_stats like a routed one. For shadow verification and the route
// tuner, which must know which provider produced a result. Throws for an unregistered name.
bool run_with_provider(const std::string& name, const c10::OperatorHandle& op,
                       torch::jit::Stack* stack, c10::DeviceIndex device);

// "aten::mm.out"; "aten::mm" for a default overload.
std::string op_full_name(const c10::OperatorHandle& op);

// The ops with a PrivateUse1 kernel of their own that still go down their route (the
// convolution hooks, the fast kernels of hot ops): "aten::add.Tensor", ...
std::vector<std::string> routed_kernel_ops();
void note_routed_kernel_op(const std::string& name);

// The boxed fallback every routed op arrives at: runs `op` down its route.
void run_routed(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack);

// For ops routed as themselves (routed_as_themselves.h): runs `op` down its route up to,
// not including, the first CPU-fallback provider; false (stack untouched) when the call
// reached it. A route that starts with a wrapper runs whole (true).
bool run_routed_before_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// For fused ops that torch computes from other ops when no backend kernel serves them
// (fused_ops.cpp): whether the route of `op` on `device` names a kernel provider (PYTHON,
// FOREIGN or EXTERNAL) before its first twin or CPU engine (wrappers passed over), and
// running the op down those providers alone; false (stack untouched) when none of them
// accepted it.
bool route_has_kernel_provider(const c10::OperatorHandle& op, c10::DeviceIndex device);
bool run_kernel_providers(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                          c10::DeviceIndex device);

// For the unboxed kernels of hot ops (fast_kernels.cpp): when the route of `op` on `device`
// starts with the twin engine (the boxing provider, or the cpu provider on a
// host-addressable device), the twin device type it runs on and the counters that
// record_call adds the call to; nullopt when the op must take run_routed.
struct RouteCounters;
struct TwinRoute {
  c10::DeviceType twin;
  RouteCounters* counters;
  const void* provider;  // identifies the provider the route starts with
  // Whether another op's route runs where this one does (same provider, same twin).
  bool same_as(const std::optional<TwinRoute>& other) const {
    return other && other->twin == twin && other->provider == provider;
  }
};
// `st`: the op's routing state (routing_state, through a per-thread cache), which lives as
// long as the process, so a caller with a fixed ATen op may look it up once (a custom op's
// state is replaced when torch deregisters the op).
struct OpState;
OpState& routing_state(const c10::OperatorHandle& op);
// How many operators torch has deregistered since flagos loaded (a torch.library.Library
// destroyed). A cache keyed by an operator name's address drops its entries when this
// changes: a new operator may be given a freed one's address.
uint64_t ops_deregistered();
std::optional<TwinRoute> twin_route(OpState& st, c10::DeviceIndex device);
// The twin device type when the route of an op on `device` starts with the twin engine,
// while capturing too (twin_route answers nullopt then, sending hot ops down run_routed):
// for a choice that must be the same in eager calls and in a capture (which kernel a
// fused op becomes).
std::optional<c10::DeviceType> route_twin(OpState& st, c10::DeviceIndex device);
// The name of the provider a TwinRoute starts with (for profiler spans).
const char* provider_name(const void* provider);
// Whether the route of `op` on `device` starts with a FOREIGN provider (after any
// wrappers): a hot op's fast
// kernel then sends the op itself down its route (the foreign library serves the functional
// form, which the composite kernel would turn into the out= form).
bool route_starts_foreign(OpState& st, c10::DeviceIndex device);
// `ticks`: op_clock ticks the call took (op_clock.h).
void record_call(RouteCounters* counters, uint64_t ticks);

// Whether a tensor argument among the `num_args` at the top of `stack`, or a tensor of a
// list argument (Tensor[], Tensor?[]), satisfies `pred`; visits them in order and stops at
// the first that does.
template <typename Pred>
bool any_tensor_argument(const torch::jit::Stack& stack, size_t num_args, Pred pred) {
  for (size_t i = stack.size() - num_args; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      if (pred(v.toTensor())) return true;
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec())
        if (pred(t)) return true;
    } else if (v.isList()) {  // Tensor?[]
      for (const c10::IValue& e : v.toListRef())
        if (e.isTensor() && pred(e.toTensor())) return true;
    }
  }
  return false;
}

}  // namespace flagos

#include "router/dispatcher.h"

#include <ATen/core/stack.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "aten/alias.h"
#include "capture/capture_state.h"
#include "engines/cpu/cpu_engine.h"
#include "engines/launch/launch_cache.h"
#include "engines/python/python_engine.h"
#include "engines/twin/twin_engine.h"
#include "router/op_clock.h"
#include "runtime/device_activity.h"
#include "runtime/hal.h"
#include "runtime/twin.h"

namespace flagos {

struct RouteCounters {
  std::atomic<uint64_t> calls{0}, ticks{0}, declined{0};  // ticks: op_clock.h
};

namespace {

struct Provider {
  std::string name;
  EngineKind kind;
  PyObjectRef callable;  // PYTHON only
  ExternalEngine external;  // EXTERNAL only
  bool wrapper = false;  // register_wrapper_provider
  // Whether its work is all queued on the current stream, so a graph capture records it
  // (capture/capture_state.h): the kernel engines' is, the CPU fallback's never, a Python
  // provider's only where it says so (set_provider_capture_safe).
  std::atomic<bool> capture_safe{false};
  // PYTHON and FOREIGN: the ops whose calls the launch cache may relaunch
  // (set_provider_replayable).
  std::atomic<const ProviderLaunches*> launches{nullptr};
  std::vector<std::unique_ptr<const ProviderLaunches>> launches_owned;  // under the mutex
};

bool default_capture_safe(EngineKind kind) {
  return kind == EngineKind::TWIN || kind == EngineKind::FOREIGN || kind == EngineKind::EXTERNAL;
}

using Counters = RouteCounters;

struct Route {
  uint64_t version;
  std::vector<std::shared_ptr<Provider>> chain;
  std::vector<Counters*> counters;
  // The twin device type when the chain starts with the twin engine (see twin_route).
  std::optional<c10::DeviceType> twin;
  // Whether the first provider after any wrappers is FOREIGN (route_starts_foreign).
  bool foreign_first = false;
};

}  // namespace

// Per operator. Routes are published through atomic raw pointers (one load on the hot
// path, no lock); replaced routes are kept in `retired` until the process ends, since a
// concurrent call may still be walking one (re-resolution happens only when the table
// changes, so they are few).
struct OpState {
  std::string name;
  int generator_arg = -1;  // the position of its Generator? argument, -1: none
  std::mutex mutex;  // guards counters creation and re-resolution
  std::unordered_map<std::string, std::unique_ptr<Counters>> counters;
  std::array<std::atomic<const Route*>, 64> routes{};
  std::vector<std::unique_ptr<const Route>> retired;
};

namespace {

void check_type(c10::DeviceType found, c10::DeviceType wanted) {
  TORCH_CHECK(found == wanted, "Expected a '", c10::DeviceTypeName(wanted, /*lower_case=*/true),
              "' device type for generator but found '",
              c10::DeviceTypeName(found, /*lower_case=*/true), "'");
}

std::atomic<uint64_t> g_version{1};
std::shared_mutex g_providers_mutex;
std::unordered_map<std::string, std::shared_ptr<Provider>> g_providers;
PyObjectRef g_resolver;

std::shared_mutex g_ops_mutex;
std::unordered_map<const c10::OperatorName*, std::unique_ptr<OpState>> g_ops;
// States of operators torch deregistered (a torch.library.Library destroyed): a call that
// began before may still hold one.
std::vector<std::unique_ptr<OpState>> g_ops_retired;
std::atomic<uint64_t> g_ops_deregistered{0};

// A state is keyed by its operator's name's address, which a later operator may be given
// once torch frees the first: a deregistered operator's state leaves the map, and caches
// keyed by the address drop theirs (ops_deregistered).
class DeregisteredOps final : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle&) override {}
  void onOperatorDeregistered(const c10::OperatorHandle& op) override {
    std::unique_lock<std::shared_mutex> lock(g_ops_mutex);
    auto it = g_ops.find(&op.operator_name());
    if (it != g_ops.end()) {
      g_ops_retired.push_back(std::move(it->second));
      g_ops.erase(it);
    }
    g_ops_deregistered.fetch_add(1, std::memory_order_acq_rel);
  }
};

void listen_for_deregistrations() {
  static auto* handle = new c10::RegistrationHandleRAII(
      c10::Dispatcher::singleton().addRegistrationListener(std::make_unique<DeregisteredOps>()));
  (void)handle;
}

OpState& op_state_slow(const c10::OperatorHandle& op, const c10::OperatorName* key) {
  static std::once_flag listening;
  std::call_once(listening, listen_for_deregistrations);
  {
    std::shared_lock<std::shared_mutex> lock(g_ops_mutex);
    auto it = g_ops.find(key);
    if (it != g_ops.end()) return *it->second;
  }
  std::unique_lock<std::shared_mutex> lock(g_ops_mutex);
  auto& slot = g_ops[key];
  if (!slot) {
    slot = std::make_unique<OpState>();
    slot->name = op_full_name(op);
    const auto& args = op.schema().arguments();
    for (size_t i = 0; i < args.size(); ++i) {
      if (is_optional_generator(args[i])) slot->generator_arg = static_cast<int>(i);
    }
  }
  return *slot;
}

// OpStates live for the process, so a small per-thread cache in front of the shared map
// spares the hot path its lock.
OpState& op_state(const c10::OperatorHandle& op) {
  struct Entry {
    const c10::OperatorName* key;
    OpState* state;
    uint64_t deregistered;
  };
  const c10::OperatorName* key = &op.operator_name();
  thread_local std::array<Entry, 128> cache{};
  auto& entry = cache[(reinterpret_cast<uintptr_t>(key) >> 4) % cache.size()];
  uint64_t deregistered = ops_deregistered();
  if (entry.key != key || entry.deregistered != deregistered)
    entry = {key, &op_state_slow(op, key), deregistered};
  return *entry.state;
}

std::shared_ptr<Provider> find_provider(const std::string& name) {
  std::shared_lock<std::shared_mutex> lock(g_providers_mutex);
  auto it = g_providers.find(name);
  return it == g_providers.end() ? nullptr : it->second;
}

const Route* resolve(OpState& st, c10::DeviceIndex device, uint64_t version) {
  std::lock_guard<std::mutex> lock(st.mutex);
  const Route* current = st.routes[device].load(std::memory_order_acquire);
  if (current && current->version == version) return current;
  std::vector<std::string> names;
  if (g_resolver) names = call_resolver(g_resolver, st.name, device);
  auto route = std::make_unique<Route>();
  route->version = version;
  for (const auto& n : names) {
    if (auto p = find_provider(n)) route->chain.push_back(std::move(p));
  }
  // The CPU fallback ends every chain: every op works from day one.
  if (route->chain.empty() || route->chain.back()->name != "cpu") {
    auto cpu = find_provider("cpu");
    TORCH_INTERNAL_ASSERT(cpu, "flagos: the cpu provider is not registered");
    route->chain.push_back(cpu);
  }
  for (const auto& p : route->chain) {
    if (p->wrapper) continue;
    route->foreign_first = p->kind == EngineKind::FOREIGN;
    break;
  }
  EngineKind head = route->chain.front()->kind;
  if (head == EngineKind::TWIN) route->twin = twin_device_type(device);
  else if (head == EngineKind::CPU && host_addressable(device)) route->twin = c10::DeviceType::CPU;
  for (const auto& p : route->chain) {
    auto& c = st.counters[p->name];
    if (!c) c = std::make_unique<Counters>();
    route->counters.push_back(c.get());
  }
  const Route* out = route.get();
  st.retired.push_back(std::move(route));
  st.routes[device].store(out, std::memory_order_release);
  return out;
}

// The flagos device an op runs on: the first flagos tensor argument, else a flagos
// Device argument, else the current device.
c10::DeviceIndex infer_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  size_t n = op.schema().arguments().size();
  std::optional<c10::DeviceIndex> from_device_arg;
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    const auto& v = stack[i];
    if (v.isTensor()) {
      const auto& t = v.toTensor();
      if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1) return t.device().index();
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1) return t.device().index();
      }
    } else if (v.isList()) {
      for (const auto& e : v.toListRef()) {
        if (e.isTensor() && e.toTensor().defined() &&
            e.toTensor().device().type() == c10::DeviceType::PrivateUse1)
          return e.toTensor().device().index();
      }
    } else if (v.isDevice() && !from_device_arg) {
      auto d = v.toDevice();
      if (d.type() == c10::DeviceType::PrivateUse1) from_device_arg = d.has_index() ? d.index() : current_device();
    }
  }
  return from_device_arg.value_or(current_device());
}

// A generator must be of the device an op runs on, as torch checks natively ("Expected a
// 'cuda' device type for generator but found 'cpu'"): a CPU generator on flagos tensors,
// or a flagos generator on a CPU factory op (which reaches flagos only through the
// generator's dispatch key), would otherwise draw from a generator of another device.
void check_generator_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                            int generator_arg) {
  size_t n = op.schema().arguments().size();
  const auto& g = stack[stack.size() - n + generator_arg];
  if (!g.isGenerator()) return;
  c10::DeviceType found = g.toGenerator().device().type();
  std::optional<c10::DeviceType> wanted;  // flagos wins; else a Device argument; else tensors
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    const auto& v = stack[i];
    if (v.isTensor() && v.toTensor().defined()) {
      auto type = v.toTensor().device().type();
      if (type == c10::DeviceType::PrivateUse1) return check_type(found, type);
      if (!wanted) wanted = type;
    } else if (v.isDevice()) {
      auto type = v.toDevice().type();
      if (type == c10::DeviceType::PrivateUse1) return check_type(found, type);
      wanted = type;
    }
  }
  check_type(found, wanted.value_or(c10::DeviceType::CPU));
}

// Where `p` declared `op` replayable (set_provider_replayable), the table of its kept
// launches.
LaunchTable* launch_table(const Provider& p, const c10::OperatorHandle& op) {
  const ProviderLaunches* launches = p.launches.load(std::memory_order_acquire);
  return launches ? launches->table(op) : nullptr;
}

bool run_provider(const Provider& p, const c10::OperatorHandle& op, torch::jit::Stack* stack,
                  c10::DeviceIndex device) {
  // The CPU fallback, the twin and an external library compute without a HAL launch: a
  // launch-cache recording open around the call (a Python kernel running this op) would
  // not repeat their work at a relaunch.
  switch (p.kind) {
    case EngineKind::CPU:
      run_cpu(op, stack, device);
      spoil_launch_recording();
      return true;
    case EngineKind::TWIN:
      run_twin(op, stack, device);
      spoil_launch_recording();
      return true;
    case EngineKind::PYTHON: {
      LaunchTable* table = launch_table(p, op);
      if (!table) return call_python_provider(p.callable, op, stack);
      return run_launch_cached(*table, op, stack,
                               [&] { return call_python_provider(p.callable, op, stack); });
    }
    case EngineKind::FOREIGN:
      return run_foreign(p.callable, op, stack, device, launch_table(p, op));
    case EngineKind::EXTERNAL: {
      bool ran = p.external.run(p.external.ctx, op, stack, device);
      if (ran) spoil_launch_recording();
      return ran;
    }
  }
  return false;
}

// One provider's attempt at a call, timed and counted under `c` (a call or a decline);
// while a profiler records device activity, a span on the device's timeline too.
bool run_timed(const Provider& p, Counters* c, const c10::OperatorHandle& op,
               torch::jit::Stack* stack, c10::DeviceIndex device) {
  device_activity::Scope span(op, [&] { return p.name.c_str(); }, device);
  uint64_t t0 = op_clock::now();
  bool accepted = run_provider(p, op, stack, device);
  if (accepted) {
    record_call(c, op_clock::now() - t0);
  } else {
    c->declined.fetch_add(1, std::memory_order_relaxed);
    span.discard();
  }
  return accepted;
}

// A random kernel takes its seed and offset as values at launch, so each replay would
// draw the numbers of the capture again. Only the CPU twin's calls, recorded as host tasks
// that run the kernel anew, draw from the generator at every replay.
bool draws_afresh_per_replay(const Provider& p, c10::DeviceIndex device) {
  return p.kind == EngineKind::TWIN && twin_device_type(device) == c10::DeviceType::CPU;
}

// Whether this call of a random op draws: an op whose randomness is its dropout (the
// attention kernels) draws nothing at dropout_p 0, as in inference, and captures as any op.
bool call_draws(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& args = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].name() != "dropout_p") continue;
    const auto& value = stack[stack.size() - args.size() + i];
    return !value.isDouble() || value.toDouble() != 0.0;
  }
  return true;
}

// run_counted while the current stream captures: a provider that is not capture-safe is
// refused, and a refusal from deeper down (a host access) names the op and provider.
bool run_captured(const Provider& p, Counters* c, const c10::OperatorHandle& op,
                  torch::jit::Stack* stack, c10::DeviceIndex device) {
  std::string who = op_full_name(op) + " through provider '" + p.name + "' (" +
                    (p.wrapper ? "wrapper" : engine_name(p.kind)) + ")";
  if (!p.capture_safe.load(std::memory_order_relaxed)) {
    capture::refuse(who + ", which is not capture-safe,", device);
  }
  if (op.hasTag(at::Tag::nondeterministic_seeded) && !draws_afresh_per_replay(p, device) &&
      call_draws(op, *stack)) {
    capture::refuse(who + ", a random op whose kernel would draw the same numbers at every "
                    "replay,", device);
  }
  try {
    return run_timed(p, c, op, stack, device);
  } catch (c10::Error& e) {
    e.add_context("while capturing " + who);
    throw;
  }
}

bool run_counted(const Provider& p, Counters* c, const c10::OperatorHandle& op,
                 torch::jit::Stack* stack, c10::DeviceIndex device) {
  if (C10_UNLIKELY(capture::current_stream_capturing(device))) {
    return run_captured(p, c, op, stack, device);
  }
  return run_timed(p, c, op, stack, device);
}

const Route* current_route(OpState& st, c10::DeviceIndex device) {
  uint64_t version = g_version.load(std::memory_order_acquire);
  const Route* route = st.routes[device].load(std::memory_order_acquire);
  return route && route->version == version ? route : resolve(st, device, version);
}

}  // namespace

namespace {

// Runs `op` down its route. `before_cpu_fallback`: stops at the first CPU-fallback provider
// instead (false returned, the stack untouched), unless a wrapper comes first, which runs
// the rest of the chain itself.
bool run_chain(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool before_cpu_fallback) {
  auto device = infer_device(op, *stack);
  hal_device(device);  // validates the index with a clear error
  OpState& st = op_state(op);
  if (st.generator_arg >= 0) check_generator_device(op, *stack, st.generator_arg);
  const Route* route = current_route(st, device);
  for (size_t i = 0; i < route->chain.size(); ++i) {
    const Provider& p = *route->chain[i];
    if (before_cpu_fallback && p.wrapper) before_cpu_fallback = false;
    if (before_cpu_fallback && p.kind == EngineKind::CPU) return false;
    if (run_counted(p, route->counters[i], op, stack, device)) return true;
  }
  TORCH_CHECK(false, "flagos: no provider accepted ", st.name);
}

}  // namespace

void run_routed(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  run_chain(op, stack, false);
}

bool run_routed_before_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  return run_chain(op, stack, true);
}

namespace {
bool is_kernel_provider(const Provider& p) {
  return p.kind != EngineKind::TWIN && p.kind != EngineKind::CPU;
}
}  // namespace

// Wrappers are passed over: their shadow run would reach the twin/CPU engines, which have
// no kernel for these fused ops.
bool route_has_kernel_provider(const c10::OperatorHandle& op, c10::DeviceIndex device) {
  const Route* route = current_route(op_state(op), device);
  for (const auto& p : route->chain) {
    if (!p->wrapper) return is_kernel_provider(*p);
  }
  return false;
}

bool run_kernel_providers(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                          c10::DeviceIndex device) {
  OpState& st = op_state(op);
  const Route* route = current_route(st, device);
  for (size_t i = 0; i < route->chain.size() && is_kernel_provider(*route->chain[i]); ++i) {
    if (route->chain[i]->wrapper) continue;
    if (run_counted(*route->chain[i], route->counters[i], op, stack, device)) return true;
  }
  return false;
}

bool run_with_provider(const std::string& name, const c10::OperatorHandle& op,
                       torch::jit::Stack* stack, c10::DeviceIndex device) {
  auto p = find_provider(name);
  TORCH_CHECK(p, "flagos: no provider named '", name, "' is registered with the core");
  hal_device(device);
  OpState& st = op_state(op);
  Counters* c;
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    auto& slot = st.counters[name];
    if (!slot) slot = std::make_unique<Counters>();
    c = slot.get();
  }
  return run_counted(*p, c, op, stack, device);
}

uint64_t ops_deregistered() { return g_ops_deregistered.load(std::memory_order_acquire); }

OpState& routing_state(const c10::OperatorHandle& op) { return op_state(op); }

std::optional<TwinRoute> twin_route(OpState& st, c10::DeviceIndex device) {
  const Route* route = current_route(st, device);
  if (!route->twin) return std::nullopt;
  // While capturing, the routed path: it refuses a provider that cannot be captured, and
  // records a CPU twin's kernels on the stream (engines/twin/captured_host_call.h).
  if (C10_UNLIKELY(capture::current_stream_capturing(device))) return std::nullopt;
  return TwinRoute{*route->twin, route->counters.front(), route->chain.front().get()};
}

std::optional<c10::DeviceType> route_twin(OpState& st, c10::DeviceIndex device) {
  return current_route(st, device)->twin;
}

bool route_starts_foreign(OpState& st, c10::DeviceIndex device) {
  return current_route(st, device)->foreign_first;
}

const char* provider_name(const void* provider) {
  return static_cast<const Provider*>(provider)->name.c_str();
}

void record_call(RouteCounters* counters, uint64_t ticks) {
  counters->calls.fetch_add(1, std::memory_order_relaxed);
  counters->ticks.fetch_add(ticks, std::memory_order_relaxed);
}

namespace {
std::mutex g_routed_kernel_ops_mutex;
std::vector<std::string>& routed_kernel_op_names() {
  static auto* names = new std::vector<std::string>();
  return *names;
}
}  // namespace

void note_routed_kernel_op(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_routed_kernel_ops_mutex);
  routed_kernel_op_names().push_back("aten::" + name);
}

std::vector<std::string> routed_kernel_ops() {
  std::lock_guard<std::mutex> lock(g_routed_kernel_ops_mutex);
  return routed_kernel_op_names();
}

std::string op_full_name(const c10::OperatorHandle& op) {
  const auto& n = op.operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

const char* engine_name(EngineKind kind) {
  switch (kind) {
    case EngineKind::CPU: return "cpu fallback";
    case EngineKind::TWIN: return "twin";
    case EngineKind::PYTHON: return "python";
    case EngineKind::FOREIGN: return "foreign kernels";
    case EngineKind::EXTERNAL: return "external";
  }
  return "unknown";
}

void register_provider(const std::string& name, EngineKind kind, void* py_callable) {
  auto p = std::make_shared<Provider>();
  p->name = name;
  p->kind = kind;
  p->capture_safe = default_capture_safe(kind);
  if (py_callable) p->callable = PyObjectRef(py_callable);
  {
    std::unique_lock<std::shared_mutex> lock(g_providers_mutex);
    g_providers[name] = std::move(p);
  }
  bump_routing_version();
}

void register_wrapper_provider(const std::string& name, void* py_callable) {
  TORCH_CHECK(py_callable, "flagos: wrapper provider '", name, "' needs a callable");
  auto p = std::make_shared<Provider>();
  p->name = name;
  p->kind = EngineKind::PYTHON;
  p->callable = PyObjectRef(py_callable);
  p->wrapper = true;
  {
    std::unique_lock<std::shared_mutex> lock(g_providers_mutex);
    g_providers[name] = std::move(p);
  }
  bump_routing_version();
}

void register_external_provider(const std::string& name, ExternalEngine engine) {
  TORCH_CHECK(engine.run, "flagos: external provider '", name, "' has no engine");
  auto p = std::make_shared<Provider>();
  p->name = name;
  p->kind = EngineKind::EXTERNAL;
  p->capture_safe = true;
  p->external = engine;
  {
    std::unique_lock<std::shared_mutex> lock(g_providers_mutex);
    g_providers[name] = std::move(p);
  }
  bump_routing_version();
}

std::vector<std::pair<std::string, std::string>> provider_engines() {
  std::shared_lock<std::shared_mutex> lock(g_providers_mutex);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, provider] : g_providers) {
    out.emplace_back(name, provider->wrapper ? "wrapper" : engine_name(provider->kind));
  }
  return out;
}

void set_provider_capture_safe(const std::string& name, bool safe) {
  auto p = find_provider(name);
  TORCH_CHECK(p, "flagos: no provider named '", name, "' is registered with the core");
  p->capture_safe = safe;
}

void set_provider_replayable(const std::string& name, const std::vector<std::string>& ops) {
  auto p = find_provider(name);
  TORCH_CHECK(p, "flagos: no provider named '", name, "' is registered with the core");
  TORCH_CHECK((p->kind == EngineKind::PYTHON || p->kind == EngineKind::FOREIGN) && !p->wrapper,
              "flagos: provider '", name, "' is neither a Python provider nor a kernel "
              "library's; only their calls are relaunched");
  auto launches = std::make_unique<const ProviderLaunches>(ops);
  std::unique_lock<std::shared_mutex> lock(g_providers_mutex);
  p->launches.store(ops.empty() ? nullptr : launches.get(), std::memory_order_release);
  p->launches_owned.push_back(std::move(launches));  // a call may still use the one before
}

bool provider_capture_safe(const std::string& name) {
  auto p = find_provider(name);
  TORCH_CHECK(p, "flagos: no provider named '", name, "' is registered with the core");
  return p->capture_safe;
}

bool provider_captures_random_ops(const std::string& name, c10::DeviceIndex device) {
  auto p = find_provider(name);
  TORCH_CHECK(p, "flagos: no provider named '", name, "' is registered with the core");
  return draws_afresh_per_replay(*p, device);
}

std::vector<std::string> registered_providers() {
  std::shared_lock<std::shared_mutex> lock(g_providers_mutex);
  std::vector<std::string> out;
  for (const auto& kv : g_providers) out.push_back(kv.first);
  return out;
}

void bump_routing_version() { g_version.fetch_add(1, std::memory_order_acq_rel); }
uint64_t routing_version() { return g_version.load(); }

void set_resolver(void* py_callable) {
  g_resolver = py_callable ? PyObjectRef(py_callable) : PyObjectRef();
  bump_routing_version();
}

std::vector<std::tuple<std::string, std::string, uint64_t, uint64_t, uint64_t>> routing_stats() {
  std::vector<std::tuple<std::string, std::string, uint64_t, uint64_t, uint64_t>> out;
  double ns_per_tick = op_clock::ns_per_tick();
  std::shared_lock<std::shared_mutex> lock(g_ops_mutex);
  for (const auto& kv : g_ops) {
    std::lock_guard<std::mutex> op_lock(kv.second->mutex);
    for (const auto& c : kv.second->counters) {
      uint64_t calls = c.second->calls.load(), declined = c.second->declined.load();
      if (calls || declined) {
        auto ns = static_cast<uint64_t>(double(c.second->ticks.load()) * ns_per_tick);
        out.emplace_back(kv.second->name, c.first, calls, ns, declined);
      }
    }
  }
  return out;
}

void reset_routing_stats() {
  std::shared_lock<std::shared_mutex> lock(g_ops_mutex);
  for (const auto& kv : g_ops) {
    std::lock_guard<std::mutex> op_lock(kv.second->mutex);
    for (const auto& c : kv.second->counters) {
      c.second->calls = 0;
      c.second->ticks = 0;
      c.second->declined = 0;
    }
  }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_routed>());
}

// Ops whose CompositeExplicitAutograd kernel would win over the fallback but refuses
// devices other than CPU/CUDA (mode.values; the *_overrideable hooks are what a PrivateUse1
// backend receives for convolution), or decomposes where every provider has a fused kernel
// (native_layer_norm: the math version goes through batch_norm, with other rounding;
// native_group_norm: the math version views its input as (1, N * groups, -1), which fails
// for the channels_last input that group_norm hands PrivateUse1, as it hands the CPU), or
// whose generated functional kernel hands the .out overload a result of the reduced shape
// that the CPU and CUDA out kernels then resize from the elementwise shape, which PyTorch
// deprecates (mse_loss, smooth_l1_loss with a reduction): route them like every other op.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"mode.values", "convolution_overrideable",
                           "convolution_backward_overrideable", "native_group_norm",
                           "mse_loss", "smooth_l1_loss"}) {
    note_routed_kernel_op(name);
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&run_routed>());
  }
}

}  // namespace flagos

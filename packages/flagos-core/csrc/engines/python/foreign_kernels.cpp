#include "engines/python/foreign_kernels.h"

#include <ATen/ops/result_type.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "aten/alias.h"
#include "engines/launch/launch_cache.h"
#include "engines/twin/twin_engine.h"
#include "router/dispatcher.h"

namespace flagos {
namespace {

// Whether a kernel's error on `op` declines the call to the next provider: for an op that
// writes none of its arguments and draws no random numbers, a kernel that raised has left
// nothing the next provider's run would not replace (its partial results are its own
// fresh tensors), so the call can still be computed; a library kernel raising on input
// that ATen computes is a library gap, not the caller's error (and an input that is wrong
// gets ATen's error from the next provider). In-place, out= and random ops propagate the
// error: the kernel may have written the caller's tensors or advanced a generator.
bool declines_on_error(const c10::OperatorHandle& op) {
  for (const auto& arg : op.schema().arguments()) {
    if (arg.alias_info() && arg.alias_info()->isWrite()) return false;
    if (arg.type()->kind() == c10::TypeKind::GeneratorType) return false;
    auto opt = arg.type()->cast<c10::OptionalType>();
    if (opt && opt->getElementType()->kind() == c10::TypeKind::GeneratorType) return false;
  }
  return true;
}

// A resolved kernel: the resolver's answer for one op, kept for the process (providers are
// few and re-registering one makes a new resolver, hence new keys). It holds the resolver,
// so that no later resolver can be made at the same address and hit this entry.
struct ResolvedKernel {
  PyObjectRef resolver;
  PyObjectRef kernel;  // empty: the library has no kernel for the op
  bool declines_on_error = false;
  mutable std::atomic<bool> warned{false};  // of a call declined on the kernel's error
};

// The resolver and the operator's full name (not its address, which a later operator may
// be given once torch frees the first).
using Key = std::pair<const void*, std::string>;

const ResolvedKernel& resolve_slow(const PyObjectRef& resolver, const c10::OperatorHandle& op) {
  Key key{resolver.get(), op_full_name(op)};
  static std::shared_mutex mutex;
  static auto* kernels = new std::map<Key, std::unique_ptr<ResolvedKernel>>();
  {
    std::shared_lock<std::shared_mutex> lock(mutex);
    auto it = kernels->find(key);
    if (it != kernels->end()) return *it->second;
  }
  // Resolved outside the lock (it takes the GIL and may import the library); of two
  // threads resolving one op at once, the first stored answer stays.
  auto resolved = std::make_unique<ResolvedKernel>();
  resolved->resolver = resolver;
  resolved->kernel = call_kernel_resolver(resolver, op_full_name(op));
  resolved->declines_on_error = declines_on_error(op);
  std::unique_lock<std::shared_mutex> lock(mutex);
  auto& slot = (*kernels)[key];
  if (!slot) slot = std::move(resolved);
  return *slot;
}

// The kernel for `op` from `resolver`, per call: a per-thread cache in front of the map.
const ResolvedKernel& kernel_for(const PyObjectRef& resolver, const c10::OperatorHandle& op) {
  struct Entry {
    const void* resolver;
    const c10::OperatorName* op;
    uint64_t deregistered;
    const ResolvedKernel* kernel;
  };
  const c10::OperatorName* name = &op.operator_name();
  thread_local std::array<Entry, 64> cache{};
  auto h = (reinterpret_cast<uintptr_t>(resolver.get()) ^ reinterpret_cast<uintptr_t>(name)) >> 4;
  auto& entry = cache[h % cache.size()];
  uint64_t deregistered = ops_deregistered();
  if (entry.kernel == nullptr || entry.resolver != resolver.get() || entry.op != name ||
      entry.deregistered != deregistered)
    entry = {resolver.get(), name, deregistered, &resolve_slow(resolver, op)};
  return *entry.kernel;
}

// A tensor argument in host memory while the twin is a device: a CPU scalar tensor, which
// ATen accepts beside device tensors (`x * torch.tensor(0.5)`), and which a library's
// device kernels cannot read (a Triton kernel given its pointer raises).
bool on_host(const at::Tensor& t) { return t.defined() && t.is_cpu(); }

// ... other than a wrapped number: the Python scalar of `x / 2.0` or `x * 3`, which ATen
// passes as a 0-dim CPU tensor where the schema takes a Tensor.
bool on_host_not_wrapped(const at::Tensor& t) {
  return on_host(t) && !t.unsafeGetTensorImpl()->is_wrapped_number();
}

// The library's kernel on the call's arguments; a kernel of a library whose wrappers raise on
// inputs ATen computes declines the call instead (the stack keeps the arguments).
bool call_kernel(const ResolvedKernel& resolved, const c10::OperatorHandle& op,
                 torch::jit::Stack* stack) {
  if (!resolved.declines_on_error) return call_python_kernel(resolved.kernel, op, stack);
  try {
    return call_python_kernel(resolved.kernel, op, stack);
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const std::exception& e) {
    if (!resolved.warned.exchange(true))
      TORCH_WARN("flagos: a kernel library raised on ", op_full_name(op), " (", e.what(),
                 "); the call ran on the next provider of its route, as will later calls "
                 "it raises on");
    return false;
  }
}

// The ops whose library kernels run on flagos tensors on this thread (run_direct), innermost
// last.
thread_local std::vector<const c10::OperatorName*> t_direct_ops;

// A kernel of a library loaded for flagos devices, on the flagos tensors themselves: there
// is no twin to alias them as, and its kernels launch through the HAL (Triton through
// flagos' driver). A wrapper may call ATen on its inputs again (its own fallback); that
// call of the same op goes past the library to the next provider of the route instead of
// into the wrapper again.
bool run_direct(const ResolvedKernel& resolved, const c10::OperatorHandle& op,
                torch::jit::Stack* stack) {
  const c10::OperatorName* name = &op.operator_name();
  if (std::find(t_direct_ops.begin(), t_direct_ops.end(), name) != t_direct_ops.end())
    return false;
  t_direct_ops.push_back(name);
  struct Leave {
    ~Leave() { t_direct_ops.pop_back(); }
  } leave;
  return call_kernel(resolved, op, stack);
}

// Whether each argument the op writes keeps its dtype beside the wrapped numbers: ATen
// raises for `int_tensor.add_(0.5)` (a float result cannot be stored in place), which a
// library kernel given the Python scalar may not; such a call goes to the next provider,
// for ATen's error.
bool wrapped_numbers_fit_written(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& arguments = op.schema().arguments();
  size_t base = stack.size() - arguments.size();
  for (size_t w = 0; w < arguments.size(); ++w) {
    const auto& alias = arguments[w].alias_info();
    if (!alias || !alias->isWrite() || !stack[base + w].isTensor()) continue;
    const at::Tensor& written = stack[base + w].toTensor();
    bool fits = !any_tensor_argument(stack, arguments.size(), [&](const at::Tensor& t) {
      return on_host(t) && !c10::canCast(at::result_type(written, t), written.scalar_type());
    });
    if (!fits) return false;
  }
  return true;
}

// run_direct with each wrapped number among the arguments replaced by its value (a Python
// scalar to the kernel); the arguments as they were where the kernel declines.
bool run_with_python_scalars(const ResolvedKernel& resolved, const c10::OperatorHandle& op,
                             torch::jit::Stack* stack) {
  size_t n = op.schema().arguments().size();
  std::vector<std::pair<size_t, c10::IValue>> replaced;
  for (size_t i = stack->size() - n; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor() && on_host(v.toTensor())) {
      c10::IValue scalar(v.toTensor().item());
      replaced.emplace_back(i, std::exchange(v, std::move(scalar)));
    }
  }
  if (run_direct(resolved, op, stack)) return true;
  for (auto& [i, v] : replaced) (*stack)[i] = std::move(v);
  return false;
}

}  // namespace

bool run_foreign(const PyObjectRef& resolver, const c10::OperatorHandle& op,
                 torch::jit::Stack* stack, c10::DeviceIndex device, LaunchTable* replay) {
  const ResolvedKernel& resolved = kernel_for(resolver, op);
  if (!resolved.kernel) return false;
  auto twin = twin_device_type(device);
  size_t n = op.schema().arguments().size();
  // A device's kernels cannot read a CPU scalar tensor that ATen takes beside its tensors.
  if ((!twin || *twin != c10::DeviceType::CPU) && any_tensor_argument(*stack, n, on_host)) {
    // Without a twin the next provider would be the CPU fallback, a round trip of every
    // tensor through host memory: wrapped numbers are given to the kernel as the Python
    // scalars they were (kernel libraries take scalars there; an in-place op's kernel that
    // raises on one propagates its error, as it does on tensors).
    if (twin || any_tensor_argument(*stack, n, on_host_not_wrapped) ||
        (!resolved.declines_on_error && !wrapped_numbers_fit_written(op, *stack)))
      return false;
    return run_with_python_scalars(resolved, op, stack);
  }
  // No twin (opaque memory): a library serves such devices only when loaded for flagos
  // devices (its provider says which HALs it runs on).
  if (!twin) {
    if (!replay) return run_direct(resolved, op, stack);
    return run_launch_cached(*replay, op, stack, [&] { return run_direct(resolved, op, stack); });
  }
  TwinCall call(device, *twin);
  bool ran = call.run_with(op, stack, [&](const c10::OperatorHandle& o, torch::jit::Stack* s) {
    return call_kernel(resolved, o, s);  // a decline leaves the arguments: run_with restores them
  });
  // on the twin its kernels launch through the twin's driver, not the HAL: a recording open
  // around this call would not repeat them
  if (ran) spoil_launch_recording();
  return ran;
}

}  // namespace flagos

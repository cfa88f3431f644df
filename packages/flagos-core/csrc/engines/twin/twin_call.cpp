#include "engines/twin/twin_call.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include <shared_mutex>
#include <unordered_set>

#include "engines/twin/default_generator.h"
#include "engines/twin/twin_layouts.h"
#include "router/dispatcher.h"
#include "runtime/generator.h"
#include "runtime/resize.h"
#include "runtime/stream.h"

namespace flagos {
namespace {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

// flagos tensors are strided; an op whose result has another layout (sparse, mkldnn) or
// a quantized dtype is refused with a clear error rather than mis-mapped.
void check_supported_result(const at::Tensor& t, const c10::OperatorHandle* op) {
  if (t.layout() == at::kStrided && !t.is_quantized()) return;
  TORCH_CHECK_NOT_IMPLEMENTED(false, "flagos: ", op ? op_full_name(*op) : std::string("an op"),
      " returns a ", t.is_quantized() ? std::string("quantized") : c10::str(t.layout()),
      " tensor; flagos supports only strided, non-quantized tensors (layout not supported)");
}

// Compared per call: the namespace prefix of the operator's name.
bool is_aten(const c10::OperatorHandle& op) {
  return op.operator_name().name.compare(0, 6, "aten::") == 0;
}

// Declared once per op by its package, read on every call of a non-aten op.
struct ResultsAllowed {
  std::shared_mutex mutex;
  std::unordered_set<std::string> ops;
};
ResultsAllowed& results_allowed() {
  static auto* allowed = new ResultsAllowed();  // leaked: ops may run during exit
  return *allowed;
}

}  // namespace

void allow_device_results_for(const std::string& op) {
  auto& allowed = results_allowed();
  std::unique_lock lock(allowed.mutex);
  allowed.ops.insert(op);
}

bool device_results_allowed(const c10::OperatorHandle& op) {
  if (is_aten(op)) return true;
  auto& allowed = results_allowed();
  std::shared_lock lock(allowed.mutex);
  return allowed.ops.count(op.operator_name().name) != 0;
}

bool is_optional_generator(const c10::Argument& arg) {
  auto t = arg.type();
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  return t->kind() == c10::TypeKind::GeneratorType;
}

std::optional<at::Generator> twin_generator_for(const std::optional<at::Generator>& given,
                                                c10::DeviceIndex device, c10::DeviceType twin) {
  at::Generator gen = given && given->defined() ? *given : default_generator(device);
  if (gen.device().type() != kFlagos) return given;
  return gen.get<FlagosGeneratorImpl>()->generator_for(twin);
}

c10::DeviceIndex TwinCall::twin_index(c10::DeviceIndex flagos_device) const {
  return twin_ == c10::DeviceType::CPU ? -1 : twin_device_index(flagos_device);
}

size_t TwinCall::alias_index(const at::Tensor& t, bool borrow) {
  // A tensor passed twice (add(x, y, out=x)) is one alias, so the kernel sees the same
  // tensor in both places, as natively (its overlap and resize checks depend on it).
  // Another argument on the same flagos storage: the alias shares that alias's storage,
  // so the kernel's partial-overlap checks (x[1:].add_(x[:-1])) hold too.
  const c10::Storage* shared = nullptr;
  for (size_t k = 0; k < originals_.size(); ++k) {
    const at::Tensor& o = originals_[k].get();
    if (o.is_same(t)) return k;
    if (!shared && o.storage().unsafeGetStorageImpl() == t.storage().unsafeGetStorageImpl()) {
      shared = &aliases_[k].storage();
    }
  }
  devices_ |= uint64_t{1} << t.device().index();
  // Lazy conjugate/negative views (ops that handle them, e.g. mm, reach us unresolved)
  // get an alias of their own carrying the bits; the others may come from the cache.
  c10::Device twin(twin_, twin_index(t.device().index()));
  at::Tensor a = shared ? alias_on(*shared, t)
               : t.is_conj() || t.is_neg() ? alias_as(t, twin) : borrowed_alias(t, twin);
  if (t.is_conj()) a._set_conj(true);
  if (t.is_neg()) a._set_neg(true);
  // Unboxed callers hold references into aliases_: it must not grow past its inline room.
  TORCH_INTERNAL_ASSERT(!borrow || aliases_.size() < kMaxUnboxedTensors);
  originals_.push_back(borrow ? Original{&t, at::Tensor()} : Original{nullptr, t});
  aliases_.push_back(std::move(a));
  return aliases_.size() - 1;
}

at::Tensor TwinCall::to_twin(const at::Tensor& t, bool borrow) {
  return is_flagos(t) ? aliases_[alias_index(t, borrow)] : t;
}

at::Tensor& TwinCall::alias(const at::Tensor& t, bool mutable_arg) {
  if (!is_flagos(t)) return const_cast<at::Tensor&>(t);
  size_t k = alias_index(t, /*borrow=*/true);
  if (mutable_arg) mutable_ |= uint32_t{1} << k;
  return aliases_[k];
}

c10::IValue TwinCall::to_twin(const c10::IValue& v, const c10::Argument& arg) {
  if (v.isTensor()) return to_twin(v.toTensor(), /*borrow=*/false);
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(to_twin(t, false));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      out.push_back(t ? std::optional<at::Tensor>(to_twin(*t, false)) : std::nullopt);
    }
    return out;
  }
  if (v.isDevice() && v.toDevice().type() == kFlagos) {
    auto d = v.toDevice().has_index() ? v.toDevice().index() : device_;
    return c10::Device(twin_, twin_index(d));
  }
  if (is_optional_generator(arg)) {
    auto gen = twin_generator_for(v.isNone() ? std::nullopt : std::optional(v.toGenerator()),
                                  device_, twin_);
    return gen ? c10::IValue(*gen) : c10::IValue();
  }
  return v;
}

void TwinCall::enter() {
  devices_ |= uint64_t{1} << device_;
  if (twin_ == c10::DeviceType::CPU) {
    for (uint64_t left = devices_; left != 0; left &= left - 1) {  // the set bits only
      sync_for_host_access(static_cast<c10::DeviceIndex>(__builtin_ctzll(left)));
    }
  } else {
    on_flagos_stream_.emplace(c10::Device(twin_, twin_index(device_)), current_stream(device_));
  }
}

c10::DispatchKeySet TwinCall::twin_keys() const {
  if (twin_ == c10::DeviceType::CPU) return c10::DispatchKeySet(c10::DispatchKey::CPU);
  return c10::DispatchKeySet(c10::computeDispatchKey(
      std::nullopt, std::nullopt, c10::Device(twin_, twin_index(device_))));
}

TwinCall::KernelScope::KernelScope(const TwinCall& call) {
  // The kernel's own allocations (its results) land in flagos memory: no copy after.
  if (call.twin_ == c10::DeviceType::CPU) {
    if (install_host_results_allocator()) host_results_.emplace(call.device_);
  } else if (call.on_flagos_stream_ && call.op_ && device_results_allowed(*call.op_) &&
             device_results_on(call.twin_)) {
    // ATen's kernels and the extension ops declared so: another extension's kernel may
    // allocate with raw_allocate, which requires a context the flagos DataPtr does not
    // have (engines/twin/device_results.h).
    device_results_.emplace(DeviceResultsScope{
        call.device_, c10::Device(call.twin_, call.twin_index(call.device_)),
        call.on_flagos_stream_->twin_stream()});
  }
}

void TwinCall::run(const c10::OperatorHandle& requested, torch::jit::Stack* stack) {
  run_with(native_equivalent(requested, stack), stack,
           [this](const c10::OperatorHandle& op, torch::jit::Stack* s) {
             op.redispatchBoxed(twin_keys(), s);
             return true;
           });
}

bool TwinCall::run_with(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                        BoxedTwinKernel kernel) {
  op_ = &op;
  boxed_ = true;
  conv_layout_ = ConvLayout::predict(op, *stack);
  prepare_twin_layouts(op, stack, twin_);
  const auto& arguments = op.schema().arguments();
  size_t n = arguments.size();
  size_t base = stack->size() - n;
  // The arguments the caller gave (moved out of the stack, not copied), put back if the
  // kernel declines.
  c10::SmallVector<c10::IValue, 8> given;
  for (size_t i = 0; i < n; ++i) {
    auto& v = (*stack)[base + i];
    c10::IValue twin = to_twin(v, arguments[i]);
    given.push_back(std::move(v));
    v = std::move(twin);
  }
  enter();
  KernelScope scope(*this);  // until the results are mapped back (adopted inside it)
  bool served;
  {
    std::optional<DefaultGeneratorLent> rng;
    if (draws_from_default_generator(op))
      rng.emplace(device_, c10::Device(twin_, twin_ == c10::DeviceType::CPU
                                                  ? c10::DeviceIndex(-1) : twin_index(device_)));
    served = kernel(op, stack);
  }
  if (!served) {
    for (size_t i = 0; i < n; ++i) (*stack)[base + i] = std::move(given[i]);
    return false;
  }
  given.clear();
  fix_mutated();
  const auto& returns = op.schema().returns();
  size_t first = stack->size() - returns.size();
  for (size_t i = first; i < stack->size(); ++i) {
    auto& v = (*stack)[i];
    if (conv_layout_ && v.isTensor() && v.toTensor().defined()) {
      auto want = conv_layout_->strides(i - first, v.toTensor().sizes());
      v = from_twin(v.toTensor(), want ? &*want : nullptr);
    } else {
      v = from_twin(v);
    }
  }
  return true;
}

// A kernel may resize or restride an out= alias; the caller's tensor must follow.
void TwinCall::fix_mutated() {
  for (size_t k = 0; k < aliases_.size(); ++k) {
    if (!boxed_ && !(mutable_ & (uint32_t{1} << k))) continue;  // a const argument
    const auto& a = aliases_[k];
    const at::Tensor& o = originals_[k].get();
    bool same_bytes = a.storage().data() == o.storage().data();
    bool same_geometry = same_ints(a.sizes(), o.sizes()) && same_ints(a.strides(), o.strides()) &&
                         a.storage_offset() == o.storage_offset();
    if (same_bytes && same_geometry) continue;
    if (same_bytes && a.storage().nbytes() <= o.storage().nbytes()) {
      o.unsafeGetTensorImpl()->set_sizes_and_strides(a.sizes(), a.strides(), a.storage_offset());
      continue;
    }
    // The twin reallocated the storage: give the flagos storage room for the twin's
    // geometry (strides included), take that geometry, and copy the values in.
    size_t needed = a.numel() == 0 ? 0
        : at::detail::computeStorageNbytes(a.sizes(), a.strides(), a.element_size(),
                                           a.storage_offset());
    if (needed > o.storage().nbytes()) {
      c10::DeviceGuard on_device(o.device());
      resize_storage_bytes(o.storage(), needed);
    }
    o.unsafeGetTensorImpl()->set_sizes_and_strides(a.sizes(), a.strides(), a.storage_offset());
    borrowed_alias(o, a.device()).copy_(a);
    // The alias may live on in the per-thread alias cache: it must not keep the bytes
    // the kernel gave it (flagos memory, on a CPU twin, see host_results.h).
    c10::StorageImpl* grown = a.storage().unsafeGetStorageImpl();
    if (a.storage().use_count() == 1) {  // not a storage the kernel shares elsewhere
      grown->set_data_ptr_noswap(c10::DataPtr(nullptr, a.device()));
      grown->set_nbytes(0);
    }
  }
}

at::Tensor& TwinCall::original_of(const at::Tensor& alias) {
  for (size_t k = 0; k < aliases_.size(); ++k) {
    if (alias.is_same(aliases_[k])) return const_cast<at::Tensor&>(originals_[k].get());
  }
  // Not one of ours: a non-flagos argument the kernel returned as it was.
  return const_cast<at::Tensor&>(alias);
}

at::Tensor TwinCall::from_twin(const at::Tensor& t, const std::vector<int64_t>* want) {
  if (!t.defined() || t.device().type() != twin_) return t;
  check_supported_result(t, op_);
  for (size_t k = 0; k < aliases_.size(); ++k) {
    if (t.is_same(aliases_[k])) return originals_[k].get();
  }
  for (size_t k = 0; k < aliases_.size(); ++k) {
    if (t.storage().unsafeGetStorageImpl() == aliases_[k].storage().unsafeGetStorageImpl()) {
      auto v = flagos_view_of(originals_[k].get(), t);
      if (t.is_conj()) v._set_conj(true);
      if (t.is_neg()) v._set_neg(true);
      return v;
    }
  }
  // A fresh result: it becomes flagos memory, counted by the flagos allocator. A kernel's
  // result already is (host_results.h, device_results.h) unless something else holds it.
  auto adopted = twin_ == c10::DeviceType::CPU ? adopt_as_flagos(t, device_)
                                               : adopt_device_result(t, device_);
  if (adopted) {
    if (!want || adopted->strides().equals(*want)) return *adopted;
    at::Tensor out = at::empty_strided(t.sizes(), *want, adopted->options());
    out.copy_(*adopted);
    return out;
  }
  at::Tensor out;
  auto opts = t.options().device(c10::Device(kFlagos, device_));
  if (want) out = at::empty_strided(t.sizes(), *want, opts);
  else if (t.is_non_overlapping_and_dense()) out = at::empty_strided(t.sizes(), t.strides(), opts);
  else out = at::empty(t.sizes(), opts);
  borrowed_alias(out, t.device()).copy_(t);
  return out;
}

c10::IValue TwinCall::from_twin(const c10::IValue& v) {
  if (v.isTensor()) return from_twin(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(from_twin(t));
    return out;
  }
  if (v.isTuple()) {
    std::vector<c10::IValue> elems;
    for (const auto& e : v.toTupleRef().elements()) elems.push_back(from_twin(e));
    return c10::ivalue::Tuple::create(std::move(elems));
  }
  return v;
}

}  // namespace flagos

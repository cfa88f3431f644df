// The two built-in ways to run an op on flagos tensors:
//  - twin: zero-copy. Every flagos tensor argument is aliased as a tensor of the HAL's
//    native twin device (CPU for sim, CUDA for CUDA-addressable HALs), the twin's kernel
//    runs, and the results are mapped back: the caller's own tensors for in-place/out=,
//    flagos views for views, fresh flagos tensors (counted by the flagos allocator) else.
//  - cpu: the CPU fallback. On host-addressable HALs it is the twin engine on the CPU;
//    on opaque HALs it copies inputs to the CPU and results back (PyTorch's cpu_fallback).
#include <ATen/native/CPUFallback.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/SmallVector.h>

#include "aten/alias.h"
#include "aten/host_results.h"
#include "dispatch/dispatcher.h"
#include "runtime/generator.h"
#include "runtime/resize.h"
#include "runtime/stream.h"

namespace flagos {
namespace {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

bool is_flagos(const at::Tensor& t) { return t.defined() && t.device().type() == kFlagos; }

bool is_optional_generator(const c10::Argument& arg) {
  auto t = arg.type();
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  return t->kind() == c10::TypeKind::GeneratorType;
}

// Random ops on a native device draw from the flagos generator's inner generator for it
// (the device's default flagos generator when none is given).
c10::IValue twin_generator_for(const c10::IValue& v, c10::DeviceIndex device,
                               c10::DeviceType twin) {
  at::Generator gen = v.isNone() ? default_generator(device) : v.toGenerator();
  if (gen.device().type() != kFlagos) return v;
  return c10::IValue(gen.get<FlagosGeneratorImpl>()->generator_for(twin));
}

// flagos tensors are strided; an op whose result has another layout (sparse, mkldnn) or
// a quantized dtype is refused with a clear error rather than mis-mapped.
void check_supported_result(const at::Tensor& t, const c10::OperatorHandle& op) {
  if (t.layout() == at::kStrided && !t.is_quantized()) return;
  TORCH_CHECK_NOT_IMPLEMENTED(false, "flagos: ", op_full_name(op), " returns a ",
      t.is_quantized() ? std::string("quantized") : c10::str(t.layout()),
      " tensor; flagos supports only strided, non-quantized tensors (layout not supported)");
}

// Operator identities compared on every routed call: the OperatorName of a registered
// operator lives as long as the process, so its address identifies the operator.
struct KnownOps {
  const c10::OperatorName* conv_overrideable;
  const c10::OperatorName* conv_backward_overrideable;
  const c10::OperatorName* conv;
  const c10::OperatorName* conv_backward;
  const c10::OperatorName* native_batch_norm;
  c10::OperatorHandle conv_handle;
  c10::OperatorHandle conv_backward_handle;
};

const KnownOps& known_ops() {
  static const KnownOps ops = [] {
    auto& d = c10::Dispatcher::singleton();
    auto conv = d.findSchemaOrThrow("aten::convolution", "");
    auto conv_backward = d.findSchemaOrThrow("aten::convolution_backward", "");
    auto name_of = [&](const char* n) { return &d.findSchemaOrThrow(n, "").operator_name(); };
    return KnownOps{name_of("aten::convolution_overrideable"),
                    name_of("aten::convolution_backward_overrideable"),
                    &conv.operator_name(),
                    &conv_backward.operator_name(),
                    name_of("aten::native_batch_norm"),
                    conv,
                    conv_backward};
  }();
  return ops;
}

// A PrivateUse1 backend receives some ops in place of the native ones (convolution goes to
// the *_overrideable hooks); the twin/CPU kernels exist only for the native op. Rewrites the
// stack for the native op and returns it.
const c10::OperatorHandle& native_equivalent(const c10::OperatorHandle& op,
                                             torch::jit::Stack* stack) {
  const c10::OperatorName* name = &op.operator_name();
  if (name == known_ops().conv_overrideable) return known_ops().conv_handle;  // same arguments
  if (name == known_ops().conv_backward_overrideable) {
    // (grad_output, input, weight, stride, padding, dilation, transposed, output_padding,
    //  groups, output_mask): convolution_backward takes bias_sizes after weight.
    size_t base = stack->size() - 10;
    const at::Tensor& weight = (*stack)[base + 2].toTensor();
    bool transposed = (*stack)[base + 6].toBool();
    int64_t groups = (*stack)[base + 8].toInt();
    int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
    stack->insert(stack->begin() + base + 3, c10::IValue(std::vector<int64_t>{channels}));
    return known_ops().conv_backward_handle;
  }
  return op;
}

// The layout torch's shape tracking predicts for the results of a flagos convolution.
//
// torch.compile traces with fake tensors; for aten::convolution / convolution_backward the
// fake kernel (torch/_subclasses/fake_impls.py `conv`, over the meta kernels of
// torch/_meta_registrations.py) asks at::native::select_conv_backend for the device's conv
// backend and lays the results out in at::native::_determine_backend_memory_format(input,
// weight, backend); Inductor checks the strides of every extern kernel's result against
// that prediction. For a PrivateUse1 tensor the backend would be `Overrideable` (contiguous
// results whatever the inputs), while the twin's kernel (mkldnn on the CPU, cudnn on CUDA)
// keeps channels_last inputs channels_last: every channels_last convolution would then be
// re-laid out, and Inductor's layout optimization would convert back and forth. So both
// sides choose the backend as the twin would: here on twin aliases of the arguments,
// in flagos_compile by a patch of torch._C._select_conv_backend for flagos fake tensors.
// Results then keep the twin kernel's layout (no copy), as native convolutions do.
//
// Mirrored (torch 2.13):
//  - mem_fmt = _determine_backend_memory_format(input, weight, select_conv_backend(...)),
//    for 1-d convolutions on the inputs unsqueezed at dim 2;
//  - convolution: result = empty(sizes).to(mem_fmt) (3-d with channels_last: through an
//    unsqueeze at dim 2);
//  - convolution_backward: grad_input/grad_weight = empty(sizes).to(fmt0).to(mem_fmt), fmt0
//    being channels_last(_3d) if input or weight suggests it; grad_bias = empty(sizes).
class ConvLayout {
 public:
  // Reads the arguments of the native op (aten::convolution or aten::convolution_backward)
  // from the stack while they are still flagos tensors. nullopt: not a convolution, or
  // arguments the prediction does not cover (the op then keeps the kernel's layout).
  static std::optional<ConvLayout> predict(const c10::OperatorHandle& op,
                                           const torch::jit::Stack& stack) {
    const c10::OperatorName* name = &op.operator_name();
    bool backward = name == known_ops().conv_backward;
    if (!backward && name != known_ops().conv) return std::nullopt;
    size_t n = op.schema().arguments().size();
    if (stack.size() < n) return std::nullopt;
    auto arg = [&](size_t k) -> const c10::IValue& { return stack[stack.size() - n + k]; };
    size_t off = backward ? 1 : 0;  // convolution_backward starts with grad_output
    if (!arg(off).isTensor() || !arg(off + 1).isTensor()) return std::nullopt;
    const at::Tensor& input = arg(off).toTensor();
    const at::Tensor& weight = arg(off + 1).toTensor();
    if (!is_flagos(input) || !is_flagos(weight)) return std::nullopt;
    std::optional<at::Tensor> bias;
    std::optional<std::vector<int64_t>> bias_sizes;
    const auto& b = arg(off + 2);
    if (!b.isNone()) {
      if (backward && b.isIntList()) bias_sizes = b.toIntVector();
      else if (!backward && b.isTensor()) bias = b.toTensor();
      else return std::nullopt;
    }
    for (size_t k : {off + 3, off + 4, off + 5, off + 7}) {
      if (!arg(k).isIntList()) return std::nullopt;
    }
    if (!arg(off + 6).isBool() || !arg(off + 8).isInt()) return std::nullopt;
    auto stride = arg(off + 3).toIntVector();
    auto padding = arg(off + 4).toIntVector();
    auto dilation = arg(off + 5).toIntVector();
    auto output_padding = arg(off + 7).toIntVector();
    ConvLayout layout;
    layout.backward_ = backward;
    // The backend is the twin's (mkldnn, cudnn), chosen on aliases of the arguments: the
    // layout then is the one the twin's kernel gives, so results need no layout change.
    // flagos_compile makes the fake kernel choose the same way (its _patches.py).
    std::optional<c10::Device> twin;
    if (auto type = twin_device_type(input.device().index())) {
      twin = *type == c10::DeviceType::CPU ? c10::Device(c10::DeviceType::CPU)
                                           : *device_twin(input.device().index());
    }
    auto on_twin = [&](const at::Tensor& t) { return twin ? alias_as(t, *twin) : t; };
    try {
      std::optional<at::Tensor> twin_bias;
      if (bias) twin_bias = on_twin(*bias);
      auto backend = at::native::select_conv_backend(
          on_twin(input), on_twin(weight), twin_bias, c10::fromIntArrayRefSlow(stride), c10::fromIntArrayRefSlow(padding),
          c10::fromIntArrayRefSlow(dilation), arg(off + 6).toBool(),
          c10::fromIntArrayRefSlow(output_padding), c10::SymInt(arg(off + 8).toInt()),
          bias_sizes ? at::OptionalSymIntArrayRef(c10::fromIntArrayRefSlow(*bias_sizes))
                     : at::OptionalSymIntArrayRef(std::nullopt));
      if (weight.dim() == 3 && !input.is_mkldnn() && !input.is_xpu()) {
        // The fake kernel asks about input.contiguous().unsqueeze(2); the answer for a
        // flagos tensor depends on its device and sizes only, so a view serves.
        layout.fmt_ = at::native::_determine_backend_memory_format(
            input.unsqueeze(2), weight.unsqueeze(2), backend);
      } else {
        layout.fmt_ = at::native::_determine_backend_memory_format(input, weight, backend);
      }
    } catch (const c10::Error&) {
      return std::nullopt;  // invalid arguments: the kernel reports them
    }
    if (backward) {
      auto fi = input.suggest_memory_format(), fw = weight.suggest_memory_format();
      if (fi == at::MemoryFormat::ChannelsLast || fw == at::MemoryFormat::ChannelsLast) {
        layout.meta_fmt_ = at::MemoryFormat::ChannelsLast;
      } else if (fi == at::MemoryFormat::ChannelsLast3d || fw == at::MemoryFormat::ChannelsLast3d) {
        layout.meta_fmt_ = at::MemoryFormat::ChannelsLast3d;
      }
    }
    return layout;
  }

  // The predicted strides of result `i` given its sizes (nullopt: keep the kernel's).
  std::optional<std::vector<int64_t>> strides(size_t i, at::IntArrayRef sizes) const {
    if (i > (backward_ ? 2u : 0u)) return std::nullopt;
    auto strides = contiguous(sizes);
    if (backward_ && i == 2) return strides;  // grad_bias: the meta kernel's empty()
    if (backward_ && !to_format(sizes, &strides, meta_fmt_)) return std::nullopt;
    if (sizes.size() == 3 && fmt_ == at::MemoryFormat::ChannelsLast) {
      // t.unsqueeze(2).to(channels_last).squeeze(2)
      std::vector<int64_t> s4{sizes[0], sizes[1], 1, sizes[2]};
      std::vector<int64_t> st4{strides[0], strides[1], strides[2] * sizes[2], strides[2]};
      if (!to_format(s4, &st4, fmt_)) return std::nullopt;
      return std::vector<int64_t>{st4[0], st4[1], st4[3]};
    }
    if (!to_format(sizes, &strides, fmt_)) return std::nullopt;
    return strides;
  }

 private:
  static std::vector<int64_t> contiguous(at::IntArrayRef sizes) {
    std::vector<int64_t> s(sizes.size());
    int64_t z = 1;
    for (size_t d = sizes.size(); d-- > 0;) {
      s[d] = z;
      z *= std::max<int64_t>(sizes[d], 1);
    }
    return s;
  }

  // Tensor.to(memory_format=fmt) on a tensor of these sizes and strides: unchanged when
  // it already is contiguous in fmt, else fmt's strides. False: fmt does not fit the rank.
  static bool to_format(at::IntArrayRef sizes, std::vector<int64_t>* strides, at::MemoryFormat fmt) {
    size_t rank = fmt == at::MemoryFormat::ChannelsLast ? 4 : fmt == at::MemoryFormat::ChannelsLast3d ? 5 : 0;
    if (rank && sizes.size() != rank) return false;
    auto probe = at::empty_strided(sizes, *strides, at::TensorOptions().device(c10::kMeta));
    if (probe.is_contiguous(fmt)) return true;
    if (rank == 4) *strides = c10::get_channels_last_strides_2d(sizes);
    else if (rank == 5) *strides = c10::get_channels_last_strides_3d(sizes);
    else *strides = contiguous(sizes);
    return true;
  }

  bool backward_ = false;
  at::MemoryFormat fmt_ = at::MemoryFormat::Contiguous;       // the fake kernel's mem_fmt
  at::MemoryFormat meta_fmt_ = at::MemoryFormat::Contiguous;  // the backward meta kernel's
};

class TwinCall {
 public:
  TwinCall(c10::DeviceIndex device, c10::DeviceType twin) : device_(device), twin_(twin) {}

  at::Tensor to_twin(const at::Tensor& t) {
    if (!is_flagos(t)) return t;
    // A tensor passed twice (add(x, y, out=x)) is one alias, so the kernel sees the same
    // tensor in both places, as natively (its overlap and resize checks depend on it).
    for (size_t k = 0; k < originals_.size(); ++k) {
      if (originals_[k].is_same(t)) return aliases_[k];
    }
    devices_ |= uint64_t{1} << t.device().index();
    c10::Device twin(twin_, twin_index(t.device().index()));
    // Lazy conjugate/negative views (ops that handle them, e.g. mm, reach us unresolved)
    // get an alias of their own carrying the bits; the others may come from the cache.
    at::Tensor a = t.is_conj() || t.is_neg() ? alias_as(t, twin) : borrowed_alias(t, twin);
    if (t.is_conj()) a._set_conj(true);
    if (t.is_neg()) a._set_neg(true);
    originals_.push_back(t);
    aliases_.push_back(a);
    return a;
  }

  c10::IValue to_twin(const c10::IValue& v, const c10::Argument& arg) {
    if (v.isTensor()) return to_twin(v.toTensor());
    if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList()) out.push_back(to_twin(t));
      return out;
    }
    if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> out;
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        out.push_back(t ? std::optional<at::Tensor>(to_twin(*t)) : std::nullopt);
      }
      return out;
    }
    if (v.isDevice() && v.toDevice().type() == kFlagos) {
      auto d = v.toDevice().has_index() ? v.toDevice().index() : device_;
      return c10::Device(twin_, twin_index(d));
    }
    if (is_optional_generator(arg)) {
      return twin_generator_for(v, device_, twin_);
    }
    return v;
  }

  void run(const c10::OperatorHandle& requested, torch::jit::Stack* stack) {
    const c10::OperatorHandle& op = native_equivalent(requested, stack);
    op_ = &op;
    conv_layout_ = ConvLayout::predict(op, *stack);
    const auto& arguments = op.schema().arguments();
    size_t n = arguments.size();
    size_t base = stack->size() - n;
    for (size_t i = 0; i < n; ++i) (*stack)[base + i] = to_twin((*stack)[base + i], arguments[i]);
    devices_ |= uint64_t{1} << device_;
    // On a device twin, everything below (the kernel, and the copies that map results
    // back) runs on the twin stream under the current flagos stream, in order.
    std::optional<TwinStreamGuard> on_flagos_stream;
    if (twin_ == c10::DeviceType::CPU) {
      for (c10::DeviceIndex d = 0; d < 64; ++d) {
        if (devices_ & (uint64_t{1} << d)) sync_for_host_access(d);
      }
      // The kernel's own allocations (its results) land in flagos memory: no copy after.
      std::optional<HostResultsOnFlagos> results_on_flagos;
      if (install_host_results_allocator()) results_on_flagos.emplace(device_);
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    } else {
      c10::Device twin_dev(twin_, twin_index(device_));
      on_flagos_stream.emplace(twin_dev, current_stream(device_));
      op.redispatchBoxed(
          c10::DispatchKeySet(c10::computeDispatchKey(std::nullopt, std::nullopt, twin_dev)),
          stack);
    }
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
  }

 private:
  c10::DeviceIndex twin_index(c10::DeviceIndex flagos_device) {
    return twin_ == c10::DeviceType::CPU ? -1 : twin_device_index(flagos_device);
  }

  // A kernel may resize or restride an out= alias; the caller's tensor must follow.
  void fix_mutated() {
    for (size_t k = 0; k < aliases_.size(); ++k) {
      const auto& a = aliases_[k];
      auto& o = originals_[k];
      bool same_bytes = a.storage().data() == o.storage().data();
      bool same_geometry = a.sizes().equals(o.sizes()) && a.strides().equals(o.strides()) &&
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

  // `want`: the strides a fresh result must have (a convolution's, see ConvLayout).
  at::Tensor from_twin(const at::Tensor& t, const std::vector<int64_t>* want = nullptr) {
    if (!t.defined() || t.device().type() != twin_) return t;
    check_supported_result(t, *op_);
    for (size_t k = 0; k < aliases_.size(); ++k) {
      if (t.is_same(aliases_[k])) return originals_[k];
    }
    for (size_t k = 0; k < aliases_.size(); ++k) {
      if (t.storage().unsafeGetStorageImpl() == aliases_[k].storage().unsafeGetStorageImpl()) {
        auto v = flagos_view_of(originals_[k], t);
        if (t.is_conj()) v._set_conj(true);
        if (t.is_neg()) v._set_neg(true);
        return v;
      }
    }
    // A fresh result: it becomes flagos memory, counted by the flagos allocator. A CPU
    // kernel's result already is (see host_results.h) unless something else holds it.
    if (twin_ == c10::DeviceType::CPU) {
      if (auto adopted = adopt_as_flagos(t)) {
        if (!want || adopted->strides().equals(*want)) return *adopted;
        at::Tensor out = at::empty_strided(t.sizes(), *want, adopted->options());
        out.copy_(*adopted);
        return out;
      }
    }
    at::Tensor out;
    auto opts = t.options().device(c10::Device(kFlagos, device_));
    if (want) out = at::empty_strided(t.sizes(), *want, opts);
    else if (t.is_non_overlapping_and_dense()) out = at::empty_strided(t.sizes(), t.strides(), opts);
    else out = at::empty(t.sizes(), opts);
    borrowed_alias(out, t.device()).copy_(t);
    return out;
  }

  c10::IValue from_twin(const c10::IValue& v) {
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

  const c10::OperatorHandle* op_ = nullptr;
  std::optional<ConvLayout> conv_layout_;
  c10::DeviceIndex device_;
  c10::DeviceType twin_;
  uint64_t devices_ = 0;  // bit d: flagos:d is involved
  c10::SmallVector<at::Tensor, 4> originals_, aliases_;
};

}  // namespace

void run_twin(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device) {
  auto twin = twin_device_type(device);
  TORCH_CHECK(twin, "flagos: the twin (boxing) engine needs a HAL whose memory a native device "
                    "can address; flagos:", int(device), " is opaque. Route ", op_full_name(op),
              " to another provider");
  TwinCall(device, *twin).run(op, stack);
}

void run_cpu(const c10::OperatorHandle& requested, torch::jit::Stack* stack,
             c10::DeviceIndex device) {
  if (host_addressable(device)) {
    TwinCall(device, c10::DeviceType::CPU).run(requested, stack);
    return;
  }
  // Opaque memory: copy in, run on the CPU, copy back (mutated args and results).
  const c10::OperatorHandle& op = native_equivalent(requested, stack);
  auto conv_layout = ConvLayout::predict(op, *stack);
  const auto& arguments = op.schema().arguments();
  size_t n = arguments.size();
  size_t base = stack->size() - n;
  bool device_arg = false;
  // at::native::cpu_fallback writes back only the arguments a schema marks mutable and
  // not optional; native_batch_norm updates running_mean/var (arguments 3, 4) without saying
  // so. Hand it CPU copies of those and write them back here.
  std::vector<std::pair<at::Tensor, at::Tensor>> written_back;
  bool batch_norm = &op.operator_name() == known_ops().native_batch_norm;
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
      v = twin_generator_for(v, device, c10::DeviceType::CPU);
    }
  }
  try {
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
  // A factory op asked for flagos: its CPU results move there.
  const auto& returns = op.schema().returns();
  for (size_t i = stack->size() - returns.size(); i < stack->size(); ++i) {
    auto& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().is_cpu()) {
      v = v.toTensor().to(c10::Device(kFlagos, device));
    }
  }
}

}  // namespace flagos

// The two built-in ways to run an op on flagos tensors:
//  - twin: zero-copy. Every flagos tensor argument is aliased as a tensor of the HAL's
//    native twin device (CPU for sim, CUDA for CUDA-addressable HALs), the twin's kernel
//    runs, and the results are mapped back: the caller's own tensors for in-place/out=,
//    flagos views for views, fresh flagos tensors (counted by the flagos allocator) else.
//  - cpu: the CPU fallback. On host-addressable HALs it is the twin engine on the CPU;
//    on opaque HALs it copies inputs to the CPU and results back (PyTorch's cpu_fallback).
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/SmallVector.h>

#include "aten/alias.h"
#include "dispatch/dispatcher.h"
#include "runtime/generator.h"
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

// Random ops on the CPU draw from the flagos generator's inner CPU generator.
c10::IValue cpu_generator_for(const c10::IValue& v, c10::DeviceIndex device) {
  at::Generator gen = v.isNone() ? default_generator(device) : v.toGenerator();
  if (gen.device().type() != kFlagos) return v;
  auto* impl = gen.get<FlagosGeneratorImpl>();
  return c10::IValue(impl->cpu_generator());
}

// flagos tensors are strided; an op whose result has another layout (sparse, mkldnn) or
// a quantized dtype is refused with a clear error rather than mis-mapped.
void check_supported_result(const at::Tensor& t, const c10::OperatorHandle& op) {
  if (t.layout() == at::kStrided && !t.is_quantized()) return;
  TORCH_CHECK_NOT_IMPLEMENTED(false, "flagos: ", op_full_name(op), " returns a ",
      t.is_quantized() ? std::string("quantized") : c10::str(t.layout()),
      " tensor; flagos supports only strided, non-quantized tensors (layout not supported)");
}

// A PrivateUse1 backend receives some ops in place of the native ones (convolution goes to
// the *_overrideable hooks); the twin/CPU kernels exist only for the native op. Rewrites the
// stack for the native op and returns it.
const c10::OperatorHandle& native_equivalent(const c10::OperatorHandle& op,
                                             torch::jit::Stack* stack) {
  const auto& name = op.operator_name();
  if (name.name == "aten::convolution_overrideable") {
    static auto conv = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
    return conv;  // same arguments
  }
  if (name.name == "aten::convolution_backward_overrideable") {
    static auto bw = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
    // (grad_output, input, weight, stride, padding, dilation, transposed, output_padding,
    //  groups, output_mask): convolution_backward takes bias_sizes after weight.
    size_t base = stack->size() - 10;
    const at::Tensor& weight = (*stack)[base + 2].toTensor();
    bool transposed = (*stack)[base + 6].toBool();
    int64_t groups = (*stack)[base + 8].toInt();
    int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
    stack->insert(stack->begin() + base + 3, c10::IValue(std::vector<int64_t>{channels}));
    return bw;
  }
  return op;
}

class TwinCall {
 public:
  TwinCall(c10::DeviceIndex device, c10::DeviceType twin) : device_(device), twin_(twin) {}

  at::Tensor to_twin(const at::Tensor& t) {
    if (!is_flagos(t)) return t;
    devices_ |= uint64_t{1} << t.device().index();
    auto a = alias_as(t, c10::Device(twin_, twin_index(t.device().index())));
    // Lazy conjugate/negative views (ops that handle them, e.g. mm, reach us unresolved).
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
    if (twin_ == c10::DeviceType::CPU && is_optional_generator(arg)) {
      return cpu_generator_for(v, device_);
    }
    return v;
  }

  void run(const c10::OperatorHandle& requested, torch::jit::Stack* stack) {
    const c10::OperatorHandle& op = native_equivalent(requested, stack);
    op_ = &op;
    const auto& arguments = op.schema().arguments();
    size_t n = arguments.size();
    size_t base = stack->size() - n;
    for (size_t i = 0; i < n; ++i) (*stack)[base + i] = to_twin((*stack)[base + i], arguments[i]);
    devices_ |= uint64_t{1} << device_;
    if (twin_ == c10::DeviceType::CPU) {
      for (c10::DeviceIndex d = 0; d < 64; ++d) {
        if (devices_ & (uint64_t{1} << d)) sync_for_host_access(d);
      }
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    } else {
      // The twin kernel runs on the twin stream that is the current flagos stream.
      // External CUDA streams are named by their handle as the c10 stream id.
      auto* twin_guard = c10::impl::getDeviceGuardImpl(twin_);
      void* handle = c10::impl::getDeviceGuardImpl(kFlagos)->getStreamNativeHandle(
          current_stream(device_));
      c10::Device twin_dev(twin_, twin_index(device_));
      auto prev_dev = twin_guard->exchangeDevice(twin_dev);
      auto prev = twin_guard->exchangeStream(c10::Stream(
          c10::Stream::UNSAFE, twin_dev, static_cast<c10::StreamId>(reinterpret_cast<intptr_t>(handle))));
      try {
        op.redispatchBoxed(c10::DispatchKeySet(c10::computeDispatchKey(std::nullopt, std::nullopt, twin_dev)),
                           stack);
      } catch (...) {
        twin_guard->exchangeStream(prev);
        twin_guard->exchangeDevice(prev_dev);
        throw;
      }
      twin_guard->exchangeStream(prev);
      twin_guard->exchangeDevice(prev_dev);
    }
    fix_mutated();
    const auto& returns = op.schema().returns();
    for (size_t i = stack->size() - returns.size(); i < stack->size(); ++i) {
      (*stack)[i] = from_twin((*stack)[i]);
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
      // The twin reallocated the storage: grow the flagos tensor and copy the values in.
      o.resize_(a.sizes());
      if (!o.strides().equals(a.strides()) && a.is_non_overlapping_and_dense()) {
        o.set_(o.storage(), 0, a.sizes(), a.strides());
        if (o.storage().nbytes() < a.storage().nbytes()) o.resize_(a.sizes());
      }
      alias_as(o, a.device()).copy_(a);
    }
  }

  at::Tensor from_twin(const at::Tensor& t) {
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
    // A fresh result: it becomes flagos memory, counted by the flagos allocator.
    at::Tensor out;
    auto opts = t.options().device(c10::Device(kFlagos, device_));
    if (t.is_non_overlapping_and_dense()) out = at::empty_strided(t.sizes(), t.strides(), opts);
    else out = at::empty(t.sizes(), opts);
    alias_as(out, t.device()).copy_(t);
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
  const auto& arguments = op.schema().arguments();
  size_t n = arguments.size();
  size_t base = stack->size() - n;
  bool device_arg = false;
  // at::native::cpu_fallback writes back only the arguments a schema marks mutable and
  // not optional; native_batch_norm updates running_mean/var (arguments 3, 4) without saying
  // so. Hand it CPU copies of those and write them back here.
  std::vector<std::pair<at::Tensor, at::Tensor>> written_back;
  bool batch_norm = op.operator_name().name == "aten::native_batch_norm";
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
      v = cpu_generator_for(v, device);
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

// One call of a bound op, as the conventions see it: its boxed arguments, the outputs it
// returns, the kernel for its dtype, the two-phase launch on the current flagos stream.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <optional>
#include <vector>

#include "binding.h"

namespace flagos_native {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;
using Desc = flagos_native_tensor_t;

inline std::optional<int32_t> dtype_code(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return FLAGOS_NATIVE_FLOAT32;
    case c10::kHalf: return FLAGOS_NATIVE_FLOAT16;
    case c10::kBFloat16: return FLAGOS_NATIVE_BFLOAT16;
    case c10::kLong: return FLAGOS_NATIVE_INT64;
    case c10::kInt: return FLAGOS_NATIVE_INT32;
    case c10::kBool: return FLAGOS_NATIVE_BOOL;
    case c10::kDouble: return FLAGOS_NATIVE_FLOAT64;
    default: return std::nullopt;
  }
}

inline bool on_device(const at::Tensor& t, c10::DeviceIndex device) {
  return t.defined() && t.device().type() == kFlagos && t.device().index() == device &&
         t.layout() == c10::kStrided && !t.is_neg() && !t.is_conj();
}

// A descriptor of `t` with its own sizes, or broadcast to `shape` (stride 0 where t has
// size 1 or lacks the dimension). False when it does not fit the ABI.
inline bool describe(const at::Tensor& t, Desc* d, c10::IntArrayRef shape = {}, bool broadcast = false) {
  auto code = dtype_code(t.scalar_type());
  if (!code) return false;
  c10::IntArrayRef sizes = broadcast ? shape : t.sizes();
  if (sizes.size() > FLAGOS_NATIVE_MAX_DIMS) return false;
  d->data = const_cast<void*>(t.const_data_ptr());
  d->dtype = *code;
  d->ndim = static_cast<int32_t>(sizes.size());
  int64_t lead = int64_t(sizes.size()) - t.dim();
  for (size_t i = 0; i < sizes.size(); ++i) {
    int64_t j = int64_t(i) - lead;
    d->sizes[i] = sizes[i];
    d->strides[i] = (j < 0 || t.size(j) == 1) ? (broadcast ? 0 : t.stride(j)) : t.stride(j);
  }
  return true;
}

// Whether `out` may be written while `in` is read: no shared storage, or exactly the
// same elements (an elementwise in-place op).
inline bool safe_to_write(const at::Tensor& out, const at::Tensor& in, bool same_elements_ok) {
  if (!in.defined() || !out.storage().is_alias_of(in.storage())) return true;
  return same_elements_ok && out.const_data_ptr() == in.const_data_ptr() &&
         out.sizes().equals(in.sizes()) && out.strides().equals(in.strides());
}

inline std::optional<double> scalar_of(const c10::IValue& v) {
  if (v.isDouble()) return v.toDouble();
  if (v.isInt()) return double(v.toInt());
  if (v.isBool()) return v.toBool() ? 1.0 : 0.0;
  if (v.isScalar()) {
    auto s = v.toScalar();
    if (s.isComplex()) return std::nullopt;
    return s.toDouble();
  }
  return std::nullopt;
}

// The current flagos stream's native handle (the HAL's stream_get_native_handle). flagos
// streams are pooled and live for the process, so each thread keeps the last answer per
// (device, stream id).
inline void* native_stream(c10::DeviceIndex device) {
  static auto* impl = c10::impl::getDeviceGuardImpl(kFlagos);
  c10::Stream s = impl->getStream(c10::Device(kFlagos, device));
  thread_local struct {
    c10::DeviceIndex device = -1;
    c10::StreamId id = -1;
    void* handle = nullptr;
  } last;
  if (last.device != device || last.id != s.id() || !last.handle) {
    last.handle = impl->getStreamNativeHandle(s);
    last.device = device;
    last.id = s.id();
  }
  return last.handle;
}

// One call in flight: the arguments, the outputs it will return, the kernel.
class Call {
 public:
  Call(const Form& form, torch::jit::Stack* stack, c10::DeviceIndex device)
      : form_(form), stack_(*stack), device_(device), base_(stack->size() - form.n_args) {}

  const c10::IValue& arg(size_t i) const { return stack_[base_ + i]; }
  at::Tensor tensor(size_t i) const {
    const auto& v = arg(i);
    return v.isTensor() ? v.toTensor() : at::Tensor();
  }
  // The same without a copy (no reference-count traffic on the hot elementwise path); an
  // undefined tensor for a non-tensor argument. Valid until finish().
  const at::Tensor& tensor_ref(size_t i) const {
    static const at::Tensor undefined;
    const auto& v = arg(i);
    return v.isTensor() ? v.toTensor() : undefined;
  }
  c10::DeviceIndex device() const { return device_; }

  // The kernel for `dtype`, or nullptr: this dtype is not served.
  const Kernel* kernel(c10::ScalarType dtype) const {
    auto code = dtype_code(dtype);
    if (!code || *code >= kDtypes) return nullptr;
    const Kernel& k = form_.binding->kernels[*code];
    return (k.plan && (k.execute || form_.binding->one_phase)) ? &k : nullptr;
  }

  // Output `i` of shape `sizes`: the out= argument (resized when empty), self for the
  // in-place form, a new tensor like `like` else. Undefined: decline.
  // `dense_ok`: the convention takes outputs with any dense non-overlapping layout (the
  // elementwise ones, whose structured kernels hand over outputs laid out like the inputs).
  at::Tensor output(size_t i, c10::IntArrayRef sizes, const at::TensorOptions& like,
                    bool dense_ok = false) {
    if (form_.kind == FormKind::OUT) {
      if (i >= form_.n_outs) return {};
      at::Tensor out = tensor(form_.first_out + i);
      if (!on_device(out, device_) || out.scalar_type() != like.dtype().toScalarType()) return {};
      if (!out.sizes().equals(sizes)) {
        if (out.numel() != 0) return {};  // torch warns and resizes: leave that to it
        out.resize_(sizes);
      }
      if (!(out.is_contiguous() || (dense_ok && out.is_non_overlapping_and_dense()))) return {};
      return out;
    }
    if (form_.kind == FormKind::INPLACE && i == 0) {
      at::Tensor self = tensor(0);
      if (!self.sizes().equals(sizes) ||
          !(self.is_contiguous() || (dense_ok && self.is_non_overlapping_and_dense())) ||
          self.scalar_type() != like.dtype().toScalarType())
        return {};
      return self;
    }
    return at::empty(sizes, like.device(c10::Device(kFlagos, device_)));
  }

  // Phase 1, the workspace, phase 2. False when the library declines the plan.
  template <class Plan>
  bool launch(const Kernel& k, Plan plan) {
    uint64_t ws_size = 0;
    flagos_native_executor_t* executor = nullptr;
    int32_t st = plan(&ws_size, &executor);
    if (st != FLAGOS_NATIVE_SUCCESS) return false;  // the next provider runs it
    at::Tensor workspace;
    if (ws_size) {
      workspace = at::empty({int64_t(ws_size)},
                            at::TensorOptions().dtype(c10::kByte).device(kFlagos, device_));
    }
    void* stream = native_stream(device_);
    st = k.execute(ws_size ? workspace.mutable_data_ptr() : nullptr, ws_size, executor, stream);
    TORCH_CHECK(st == FLAGOS_NATIVE_SUCCESS, "flagos native: kernel of ", form_.binding->library->path,
                " failed (status ", st, "): ", form_.binding->library->error_text());
    return true;
  }

  // Replace the arguments by the one result `r`. When r is the out= tensor (or self, for
  // the in-place form), its IValue moves from the arguments to the result: the caller's
  // tensor is handed back without touching its reference count.
  void finish_one(const at::Tensor& r) {
    size_t keep = form_.kind == FormKind::OUT       ? form_.first_out
                  : form_.kind == FormKind::INPLACE ? 0
                                                    : form_.n_args;
    if (keep < form_.n_args && form_.n_outs <= 1 && stack_[base_ + keep].isTensor() &&
        stack_[base_ + keep].toTensor().is_same(r)) {
      c10::IValue v = std::move(stack_[base_ + keep]);
      torch::jit::drop(stack_, form_.n_args);
      stack_.push_back(std::move(v));
      return;
    }
    torch::jit::drop(stack_, form_.n_args);
    stack_.emplace_back(r);
  }

  // Replace the arguments by the results.
  void finish(std::initializer_list<at::Tensor> results) {
    torch::jit::drop(stack_, form_.n_args);
    for (const auto& r : results) stack_.emplace_back(r);
  }
  // The same, for ops that return more than tensors.
  void finish_values(std::initializer_list<c10::IValue> results) {
    torch::jit::drop(stack_, form_.n_args);
    for (const auto& r : results) stack_.push_back(r);
  }

  const Form& form() const { return form_; }

 private:
  const Form& form_;
  torch::jit::Stack& stack_;
  c10::DeviceIndex device_;
  size_t base_;
};

// The checked arguments of mm(self, mat2), bmm(self, mat2) and addmm(self, mat1, mat2, *,
// beta, alpha), with the output: what every matmul-family convention starts from. nullopt
// to decline (no flagos operands of one dtype, shapes that do not multiply, aliasing).
struct MatmulCall {
  bool addmm;
  at::Tensor bias, a, b, out;
  const Kernel* kernel;
  double beta, alpha;
  std::vector<int64_t> shape;
};
inline std::optional<MatmulCall> matmul_call(Call& c) {
  MatmulCall m;
  m.addmm = c.form().n_inputs >= 5;
  if (m.addmm) m.bias = c.tensor(0);
  m.a = c.tensor(m.addmm ? 1 : 0);
  m.b = c.tensor(m.addmm ? 2 : 1);
  const at::Tensor &a = m.a, &b = m.b;
  if (!on_device(a, c.device()) || !on_device(b, c.device())) return std::nullopt;
  if (m.addmm && !on_device(m.bias, c.device())) return std::nullopt;
  if (a.dim() != b.dim() || (a.dim() != 2 && a.dim() != 3)) return std::nullopt;
  if (b.scalar_type() != a.scalar_type() ||
      (m.addmm && m.bias.scalar_type() != a.scalar_type()))
    return std::nullopt;
  int r = int(a.dim()) - 2;
  if (a.size(r + 1) != b.size(r) || (a.dim() == 3 && a.size(0) != b.size(0))) return std::nullopt;
  m.kernel = c.kernel(a.scalar_type());
  if (!m.kernel) return std::nullopt;
  m.beta = m.alpha = 1.0;
  if (m.addmm) {
    auto sb = scalar_of(c.arg(3)), sa = scalar_of(c.arg(4));
    if (!sb || !sa) return std::nullopt;
    m.beta = *sb;
    m.alpha = *sa;
  }
  m.shape.assign(a.sizes().begin(), a.sizes().end());
  m.shape.back() = b.size(r + 1);
  if (m.addmm && !at::is_expandable_to(m.bias.sizes(), m.shape)) return std::nullopt;
  m.out = c.output(0, m.shape, a.options());
  // out may be the bias itself (addmm_): each element of it is read just before it is
  // written.
  if (!m.out.defined() || !safe_to_write(m.out, a, false) || !safe_to_write(m.out, b, false) ||
      !safe_to_write(m.out, m.bias, true))
    return std::nullopt;
  return m;
}

// The rows of a layer norm: normalized_shape must be the trailing sizes of input.
inline std::optional<std::pair<int64_t, std::vector<int64_t>>> norm_rows(const at::Tensor& input,
                                                                  const c10::IValue& shape_arg) {
  auto shape = shape_arg.toIntVector();
  int64_t axis = input.dim() - int64_t(shape.size());
  if (axis < 0) return std::nullopt;
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (input.size(axis + int64_t(i)) != shape[i]) return std::nullopt;
    n *= shape[i];
  }
  std::vector<int64_t> stat_shape(input.sizes().begin(), input.sizes().begin() + axis);
  stat_shape.resize(size_t(input.dim()), 1);
  return std::make_pair(n, stat_shape);
}

inline bool optional_param(const at::Tensor& t, c10::DeviceIndex device, c10::ScalarType dtype,
                    int64_t n) {
  return !t.defined() ||
         (on_device(t, device) && t.scalar_type() == dtype && t.is_contiguous() && t.numel() == n);
}

// The input of a normalization forward (layer norm, RMS norm): on the device, contiguous,
// of a served dtype, normalized over trailing sizes that are not empty. Its kernel, the
// normalized element count and the shape of the per-row statistics; nullopt to decline.
struct NormInput {
  const Kernel* kernel;
  int64_t n;
  std::vector<int64_t> stat_shape;
};
inline std::optional<NormInput> norm_input(Call& c, const at::Tensor& input,
                                           const c10::IValue& normalized_shape) {
  if (!on_device(input, c.device()) || !input.is_contiguous()) return std::nullopt;
  const Kernel* k = c.kernel(input.scalar_type());
  if (!k) return std::nullopt;
  auto rows = norm_rows(input, normalized_shape);
  if (!rows || rows->first == 0) return std::nullopt;
  return NormInput{k, rows->first, std::move(rows->second)};
}

// fused_conventions.cpp: _fused_rms_norm and its backward, the overrideable fused attention
// and its backward.
bool run_rms_norm(Call& c);
bool run_rms_norm_backward(Call& c);
bool run_attention(Call& c);
bool run_attention_backward(Call& c);

// cublas_gemm.cpp: mm, bmm, addmm through cuBLAS (Convention::CUBLAS_GEMM).
bool run_cublas_gemm(Call& c);

template <class Fn>
inline Fn typed(const Kernel& k) {
  return reinterpret_cast<Fn>(k.plan);
}

}  // namespace flagos_native

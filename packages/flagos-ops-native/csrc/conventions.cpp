// The calling conventions: how the boxed arguments of an ATen op become the typed call of
// a vendor kernel (flagos_native/kernel_abi.h), and its results the op's results. A call
// the kernel cannot take (dtype, layout, an argument value) declines before anything is
// queued, so the next provider runs it with the inputs untouched.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "binding.h"
#include "call.h"

namespace flagos_native {

bool parse_convention(const std::string& name, Convention* out) {
  static const std::pair<const char*, Convention> names[] = {
      {"unary", Convention::UNARY},
      {"binary", Convention::BINARY},
      {"reduction", Convention::REDUCTION},
      {"matmul", Convention::MATMUL},
      {"softmax", Convention::SOFTMAX},
      {"softmax_backward", Convention::SOFTMAX_BACKWARD},
      {"layer_norm", Convention::LAYER_NORM},
      {"layer_norm_backward", Convention::LAYER_NORM_BACKWARD},
      {"index_select", Convention::INDEX_SELECT},
      {"embedding_backward", Convention::EMBEDDING_BACKWARD},
      {"rms_norm", Convention::RMS_NORM},
      {"rms_norm_backward", Convention::RMS_NORM_BACKWARD},
      {"attention", Convention::ATTENTION},
      {"attention_backward", Convention::ATTENTION_BACKWARD},
      {"cublas_gemm", Convention::CUBLAS_GEMM},
  };
  for (const auto& [n, c] : names) {
    if (name == n) {
      *out = c;
      return true;
    }
  }
  return false;
}

Form make_form(const c10::OperatorHandle& op, const Binding* binding) {
  const auto& args = op.schema().arguments();
  Form f{binding, FormKind::FUNCTIONAL, args.size(), args.size(), args.size(), 0};
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* alias = args[i].alias_info();
    if (args[i].kwarg_only() && alias && alias->isWrite()) {
      if (f.kind != FormKind::OUT) f.first_out = i;
      f.kind = FormKind::OUT;
      ++f.n_outs;
    }
  }
  if (f.kind == FormKind::OUT) {
    f.n_inputs = f.first_out;
  } else if (!args.empty() && args[0].alias_info() && args[0].alias_info()->isWrite()) {
    f.kind = FormKind::INPLACE;
  }
  return f;
}

namespace {

bool run_unary(Call& c) {
  const at::Tensor& self = c.tensor_ref(0);
  if (!on_device(self, c.device())) return false;
  const Kernel* k = c.kernel(self.scalar_type());
  if (!k) return false;
  at::Tensor out = c.output(0, self.sizes(), self.options(), true);
  if (!out.defined() || !safe_to_write(out, self, true)) return false;
  Desc a, o;
  if (!describe(self, &a) || !describe(out, &o)) return false;
  if (!c.launch(*k, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_unary_fn>(*k)(&a, &o, ws, ex);
      }))
    return false;
  c.finish_one(out);
  return true;
}

bool run_binary(Call& c) {
  const at::Tensor& self = c.tensor_ref(0);
  if (!on_device(self, c.device())) return false;
  at::Tensor moved;  // `other` moved to the device, when it is a Python number
  const at::Tensor* other_p = &c.tensor_ref(1);
  // A 0-dim CPU operand (a Python number: x * 0.5) does not change the result dtype of a
  // floating self, nor an integer one of an integer self; it moves to the device as a
  // one-element tensor of self's dtype. (An integer self with a float number promotes:
  // the result is float, and the call declines below.)
  if (other_p->defined() && other_p->device().is_cpu() && other_p->dim() == 0 &&
      !other_p->is_complex() &&
      (at::isFloatingType(self.scalar_type()) ||
       (at::isIntegralType(self.scalar_type(), false) &&
        at::isIntegralType(other_p->scalar_type(), false)))) {
    moved = other_p->to(self.options());
    other_p = &moved;
  }
  const at::Tensor& other = *other_p;
  if (!on_device(other, c.device())) return false;
  if (self.scalar_type() != other.scalar_type()) return false;  // type promotion: not here
  const Kernel* k = c.kernel(self.scalar_type());
  if (!k) return false;
  double scalar = 1.0;
  if (c.form().n_inputs > 2) {
    auto s = scalar_of(c.arg(2));
    if (!s) return false;
    scalar = *s;
  }
  auto shape = at::infer_size_dimvector(self.sizes(), other.sizes());
  at::Tensor out = c.output(0, shape, self.options(), true);
  if (!out.defined() || !safe_to_write(out, self, true) || !safe_to_write(out, other, true))
    return false;
  Desc a, b, o;
  if (!describe(self, &a, shape, true) || !describe(other, &b, shape, true) || !describe(out, &o))
    return false;
  if (!c.launch(*k, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_binary_fn>(*k)(&a, &b, scalar, &o, ws, ex);
      }))
    return false;
  c.finish_one(out);
  return true;
}

// sum.dim_IntList / mean.dim: (self, dim?, keepdim, *, dtype?).
bool run_reduction(Call& c) {
  at::Tensor self = c.tensor(0);
  if (!on_device(self, c.device()) || c.form().n_inputs < 4) return false;
  const auto& dtype = c.arg(3);
  if (!dtype.isNone() && dtype.toScalarType() != self.scalar_type()) return false;
  const Kernel* k = c.kernel(self.scalar_type());
  if (!k) return false;
  std::vector<int64_t> dims;
  if (!c.arg(1).isNone()) {
    for (int64_t d : c.arg(1).toIntVector()) dims.push_back(at::maybe_wrap_dim(d, self.dim()));
  }
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end()) return false;
  bool keepdim = c.arg(2).toBool();
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < self.dim(); ++d) {
    bool reduced = dims.empty() || std::binary_search(dims.begin(), dims.end(), d);
    if (!reduced) shape.push_back(self.size(d));
    else if (keepdim) shape.push_back(1);
  }
  at::Tensor out = c.output(0, shape, self.options());
  if (!out.defined() || !safe_to_write(out, self, false)) return false;
  Desc a, o;
  if (!describe(self, &a) || !describe(out, &o)) return false;
  if (!c.launch(*k, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_reduction_fn>(*k)(&a, dims.data(), int32_t(dims.size()),
                                                     keepdim, &o, ws, ex);
      }))
    return false;
  c.finish({out});
  return true;
}

// mm(self, mat2), bmm(self, mat2), addmm(self, mat1, mat2, *, beta, alpha).
bool run_matmul(Call& c) {
  auto m = matmul_call(c);
  if (!m) return false;
  Desc da, db, dc, o;
  if (!describe(m->a, &da) || !describe(m->b, &db) || !describe(m->out, &o)) return false;
  if (m->addmm && !describe(m->bias, &dc, m->shape, true)) return false;
  const Kernel& k = *m->kernel;
  if (!c.launch(k, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_matmul_fn>(k)(m->addmm ? &dc : nullptr, &da, &db, m->beta,
                                                 m->alpha, &o, ws, ex);
      }))
    return false;
  c.finish({m->out});
  return true;
}

// _softmax / _log_softmax(self, dim, half_to_float).
bool run_softmax(Call& c) {
  at::Tensor self = c.tensor(0);
  if (!on_device(self, c.device()) || c.arg(2).toBool() || !self.is_contiguous()) return false;
  const Kernel* k = c.kernel(self.scalar_type());
  if (!k) return false;
  int64_t dim = at::maybe_wrap_dim(c.arg(1).toInt(), self.dim());
  at::Tensor out = c.output(0, self.sizes(), self.options());
  if (!out.defined() || !safe_to_write(out, self, false)) return false;
  Desc a, o;
  if (!describe(self, &a) || !describe(out, &o)) return false;
  if (!c.launch(*k, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_softmax_fn>(*k)(&a, dim, &o, ws, ex);
      }))
    return false;
  c.finish({out});
  return true;
}

// _softmax_backward_data / _log_softmax_backward_data(grad_output, output, dim, input_dtype).
bool run_softmax_backward(Call& c) {
  at::Tensor grad = c.tensor(0), output = c.tensor(1);
  if (!on_device(grad, c.device()) || !on_device(output, c.device())) return false;
  if (grad.scalar_type() != output.scalar_type() || c.arg(3).toScalarType() != grad.scalar_type())
    return false;
  if (!grad.is_contiguous() || !output.is_contiguous() || !grad.sizes().equals(output.sizes()))
    return false;
  const Kernel* k = c.kernel(grad.scalar_type());
  if (!k) return false;
  int64_t dim = at::maybe_wrap_dim(c.arg(2).toInt(), grad.dim());
  at::Tensor out = c.output(0, grad.sizes(), grad.options());
  if (!out.defined() || !safe_to_write(out, grad, false) || !safe_to_write(out, output, false))
    return false;
  Desc g, y, o;
  if (!describe(grad, &g) || !describe(output, &y) || !describe(out, &o)) return false;
  if (!c.launch(*k, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_softmax_backward_fn>(*k)(&g, &y, dim, &o, ws, ex);
      }))
    return false;
  c.finish({out});
  return true;
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd).
bool run_layer_norm(Call& c) {
  at::Tensor input = c.tensor(0), weight = c.tensor(2), bias = c.tensor(3);
  auto norm = norm_input(c, input, c.arg(1));
  if (!norm) return false;
  const Kernel* k = norm->kernel;
  int64_t n = norm->n;
  if (!optional_param(weight, c.device(), input.scalar_type(), n) ||
      !optional_param(bias, c.device(), input.scalar_type(), n))
    return false;
  double eps = c.arg(4).toDouble();
  at::Tensor out = c.output(0, input.sizes(), input.options());
  at::Tensor mean = c.output(1, norm->stat_shape, input.options());
  at::Tensor rstd = c.output(2, norm->stat_shape, input.options());
  if (!out.defined() || !mean.defined() || !rstd.defined()) return false;
  for (const auto& in : {input, weight, bias}) {
    for (const auto& o : {out, mean, rstd}) if (!safe_to_write(o, in, false)) return false;
  }
  Desc x, w, b, o, m, s;
  if (!describe(input, &x) || !describe(out, &o) || !describe(mean, &m) || !describe(rstd, &s))
    return false;
  if (weight.defined() && !describe(weight, &w)) return false;
  if (bias.defined() && !describe(bias, &b)) return false;
  if (!c.launch(*k, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_norm_fn>(*k)(&x, n, weight.defined() ? &w : nullptr,
                                                bias.defined() ? &b : nullptr, eps, &o, &m, &s,
                                                ws, ex);
      }))
    return false;
  c.finish({out, mean, rstd});
  return true;
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
// output_mask) -> (grad_input?, grad_weight?, grad_bias?).
bool run_layer_norm_backward(Call& c) {
  at::Tensor grad = c.tensor(0), input = c.tensor(1), mean = c.tensor(3), rstd = c.tensor(4),
             weight = c.tensor(5), bias = c.tensor(6);
  for (const auto& t : {grad, input, mean, rstd}) {
    if (!on_device(t, c.device()) || !t.is_contiguous() || t.scalar_type() != input.scalar_type())
      return false;
  }
  if (!grad.sizes().equals(input.sizes())) return false;
  const Kernel* k = c.kernel(input.scalar_type());
  if (!k) return false;
  auto rows = norm_rows(input, c.arg(2));
  if (!rows || rows->first == 0) return false;
  int64_t n = rows->first;
  if (!optional_param(weight, c.device(), input.scalar_type(), n) ||
      !optional_param(bias, c.device(), input.scalar_type(), n))
    return false;
  auto mask = c.arg(7).toBoolList();
  if (mask.size() != 3 || mean.numel() * n != input.numel()) return false;
  // Weight and bias gradients take the parameters' shape; without them there are none.
  bool want_w = mask[1] && weight.defined(), want_b = mask[2] && bias.defined();
  if ((mask[1] && !weight.defined()) || (mask[2] && !bias.defined())) return false;
  at::Tensor gi, gw, gb;
  if (mask[0] && !(gi = c.output(0, input.sizes(), input.options())).defined()) return false;
  if (want_w && !(gw = c.output(1, weight.sizes(), weight.options())).defined()) return false;
  if (want_b && !(gb = c.output(2, bias.sizes(), bias.options())).defined()) return false;
  for (const auto& in : {grad, input, mean, rstd, weight}) {
    for (const auto& o : {gi, gw, gb}) if (o.defined() && !safe_to_write(o, in, false)) return false;
  }
  Desc dg, dx, dm, ds, dw, dgi, dgw, dgb;
  if (!describe(grad, &dg) || !describe(input, &dx) || !describe(mean, &dm) || !describe(rstd, &ds))
    return false;
  if (weight.defined() && !describe(weight, &dw)) return false;
  if ((gi.defined() && !describe(gi, &dgi)) || (gw.defined() && !describe(gw, &dgw)) ||
      (gb.defined() && !describe(gb, &dgb)))
    return false;
  if (!c.launch(*k, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_norm_backward_fn>(*k)(
            &dg, &dx, n, &dm, &ds, weight.defined() ? &dw : nullptr, gi.defined() ? &dgi : nullptr,
            gw.defined() ? &dgw : nullptr, gb.defined() ? &dgb : nullptr, ws, ex);
      }))
    return false;
  c.finish({gi, gw, gb});
  return true;
}

// index_select(self, dim, index).
bool run_index_select(Call& c) {
  at::Tensor self = c.tensor(0), index = c.tensor(2);
  if (!on_device(self, c.device()) || !on_device(index, c.device())) return false;
  if (!self.is_contiguous() || index.dim() > 1) return false;
  if (index.scalar_type() != c10::kLong && index.scalar_type() != c10::kInt) return false;
  const Kernel* k = c.kernel(self.scalar_type());
  if (!k) return false;
  int64_t dim = at::maybe_wrap_dim(c.arg(1).toInt(), self.dim());
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  if (self.dim() == 0) {
    if (index.numel() != 1) return false;
  } else {
    shape[size_t(dim)] = index.numel();
  }
  at::Tensor out = c.output(0, shape, self.options());
  if (!out.defined() || !safe_to_write(out, self, false) || !safe_to_write(out, index, false))
    return false;
  Desc a, i, o;
  if (!describe(self, &a) || !describe(index, &i) || !describe(out, &o)) return false;
  if (!c.launch(*k, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_index_select_fn>(*k)(&a, dim, &i, &o, ws, ex);
      }))
    return false;
  c.finish({out});
  return true;
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq).
bool run_embedding_backward(Call& c) {
  at::Tensor grad = c.tensor(0), indices = c.tensor(1);
  if (!on_device(grad, c.device()) || !on_device(indices, c.device())) return false;
  if (c.arg(4).toBool() || !grad.is_contiguous() || grad.dim() < 1) return false;
  if (indices.scalar_type() != c10::kLong && indices.scalar_type() != c10::kInt) return false;
  const Kernel* k = c.kernel(grad.scalar_type());
  if (!k) return false;
  int64_t num = c.arg(2).toInt(), padding = c.arg(3).toInt(), dim = grad.size(-1);
  if (grad.numel() != indices.numel() * dim) return false;
  at::Tensor out = c.output(0, {num, dim}, grad.options());
  if (!out.defined() || !safe_to_write(out, grad, false) || !safe_to_write(out, indices, false))
    return false;
  Desc g, i, o;
  if (!describe(grad, &g) || !describe(indices, &i) || !describe(out, &o)) return false;
  if (!c.launch(*k, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_embedding_backward_fn>(*k)(&g, &i, padding, &o, ws, ex);
      }))
    return false;
  c.finish({out});
  return true;
}

}  // namespace

bool run_convention(const Form& form, const c10::OperatorHandle& op, torch::jit::Stack* stack,
                    c10::DeviceIndex device) {
  Call c(form, stack, device);
  switch (form.binding->convention) {
    case Convention::UNARY: return run_unary(c);
    case Convention::BINARY: return run_binary(c);
    case Convention::REDUCTION: return run_reduction(c);
    case Convention::MATMUL: return run_matmul(c);
    case Convention::SOFTMAX: return run_softmax(c);
    case Convention::SOFTMAX_BACKWARD: return run_softmax_backward(c);
    case Convention::LAYER_NORM: return run_layer_norm(c);
    case Convention::LAYER_NORM_BACKWARD: return run_layer_norm_backward(c);
    case Convention::INDEX_SELECT: return run_index_select(c);
    case Convention::EMBEDDING_BACKWARD: return run_embedding_backward(c);
    case Convention::CUBLAS_GEMM: return run_cublas_gemm(c);
    case Convention::RMS_NORM: return run_rms_norm(c);
    case Convention::RMS_NORM_BACKWARD: return run_rms_norm_backward(c);
    case Convention::ATTENTION: return run_attention(c);
    case Convention::ATTENTION_BACKWARD: return run_attention_backward(c);
  }
  return false;
}

}  // namespace flagos_native

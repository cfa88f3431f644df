// The fused conventions: RMS norm (_fused_rms_norm) and the overrideable fused attention
// (_scaled_dot_product_fused_attention_overrideable), forward and backward. flagos-core
// sends these ops here only when their route names a kernel provider
// (router/fused_ops.cpp); a call declined here is computed there from other ops.
#include <ATen/core/Tensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>

#include <cfloat>
#include <cmath>

#include "call.h"

namespace flagos_native {

namespace {

bool is_float_kernel_dtype(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kHalf || t == c10::kBFloat16;
}

}  // namespace

// _fused_rms_norm(input, normalized_shape, weight?, eps?) -> (out, rstd).
bool run_rms_norm(Call& c) {
  at::Tensor input = c.tensor(0), weight = c.tensor(2);
  if (c.form().kind != FormKind::FUNCTIONAL) return false;
  auto norm = norm_input(c, input, c.arg(1));
  if (!norm) return false;
  const Kernel* k = norm->kernel;
  int64_t n = norm->n;
  if (!optional_param(weight, c.device(), input.scalar_type(), n)) return false;
  // torch's default: the epsilon of the type the norm is computed in (float for all three).
  double eps = c.arg(3).isNone() ? double(FLT_EPSILON) : c.arg(3).toDouble();
  at::Tensor out = c.output(0, input.sizes(), input.options());
  at::Tensor rstd = c.output(1, norm->stat_shape, input.options().dtype(c10::kFloat));
  if (!out.defined() || !rstd.defined()) return false;
  Desc x, w, o, s;
  if (!describe(input, &x) || !describe(out, &o) || !describe(rstd, &s)) return false;
  if (weight.defined() && !describe(weight, &w)) return false;
  if (!c.launch(*k, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_rms_norm_fn>(*k)(&x, n, weight.defined() ? &w : nullptr, eps,
                                                    &o, &s, ws, ex);
      }))
    return false;
  c.finish({out, rstd});
  return true;
}

// _fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight?, output_mask)
// -> (grad_input?, grad_weight?).
bool run_rms_norm_backward(Call& c) {
  at::Tensor grad = c.tensor(0), input = c.tensor(1), rstd = c.tensor(3), weight = c.tensor(4);
  if (c.form().kind != FormKind::FUNCTIONAL) return false;
  for (const auto& t : {grad, input, rstd}) {
    if (!on_device(t, c.device()) || !t.is_contiguous()) return false;
  }
  if (grad.scalar_type() != input.scalar_type() || rstd.scalar_type() != c10::kFloat ||
      !grad.sizes().equals(input.sizes()))
    return false;
  const Kernel* k = c.kernel(input.scalar_type());
  if (!k) return false;
  auto rows = norm_rows(input, c.arg(2));
  if (!rows || rows->first == 0 || rstd.numel() * rows->first != input.numel()) return false;
  int64_t n = rows->first;
  if (!optional_param(weight, c.device(), input.scalar_type(), n)) return false;
  auto mask = c.arg(5).toBoolList();
  if (mask.size() != 2 || (mask[1] && !weight.defined())) return false;
  at::Tensor gi, gw;
  if (mask[0] && !(gi = c.output(0, input.sizes(), input.options())).defined()) return false;
  if (mask[1] && !(gw = c.output(1, weight.sizes(), weight.options())).defined()) return false;
  Desc dg, dx, ds, dw, dgi, dgw;
  if (!describe(grad, &dg) || !describe(input, &dx) || !describe(rstd, &ds)) return false;
  if (weight.defined() && !describe(weight, &dw)) return false;
  if ((gi.defined() && !describe(gi, &dgi)) || (gw.defined() && !describe(gw, &dgw))) return false;
  if (!c.launch(*k, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_rms_norm_backward_fn>(*k)(
            &dg, &dx, n, &ds, weight.defined() ? &dw : nullptr, gi.defined() ? &dgi : nullptr,
            gw.defined() ? &dgw : nullptr, ws, ex);
      }))
    return false;
  c.finish({gi, gw});
  return true;
}

namespace {

// q, k, v of one dtype with a kernel, 4-D [B, H, L, E] with matching batch, key/value heads
// dividing the query heads; the mask (may be undefined) bool or of q's dtype, broadcastable
// to the score shape. Fills the descriptors; false to decline.
struct AttentionArgs {
  const Kernel* kernel;
  Desc q, k, v, mask;
  bool has_mask;
  double scale;
  std::vector<int64_t> out_shape, lse_shape;
};
bool attention_args(Call& c, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& mask, const c10::IValue& scale, AttentionArgs* a) {
  for (const auto& t : {q, k, v}) {
    if (!on_device(t, c.device()) || t.dim() != 4 || t.scalar_type() != q.scalar_type())
      return false;
  }
  if (!is_float_kernel_dtype(q.scalar_type()) || !(a->kernel = c.kernel(q.scalar_type())))
    return false;
  int64_t B = q.size(0), Hq = q.size(1), Lq = q.size(2), E = q.size(3);
  int64_t Hk = k.size(1), Lk = k.size(2), Ev = v.size(3);
  if (k.size(0) != B || v.size(0) != B || v.size(1) != Hk || v.size(2) != Lk || k.size(3) != E ||
      Hk == 0 || Hq % Hk)
    return false;
  a->has_mask = mask.defined();
  std::vector<int64_t> scores{B, Hq, Lq, Lk};
  if (a->has_mask) {
    if (!on_device(mask, c.device()) ||
        (mask.scalar_type() != c10::kBool && mask.scalar_type() != q.scalar_type()) ||
        !at::is_expandable_to(mask.sizes(), scores) || !describe(mask, &a->mask, scores, true))
      return false;
  }
  if (!describe(q, &a->q) || !describe(k, &a->k) || !describe(v, &a->v)) return false;
  a->scale = scale.isNone() ? 1.0 / std::sqrt(double(E)) : scale.toDouble();
  a->out_shape = {B, Hq, Lq, Ev};
  a->lse_shape = {B, Hq, Lq};
  return true;
}

}  // namespace

// _scaled_dot_product_fused_attention_overrideable(q, k, v, attn_bias?, dropout_p,
// is_causal, return_debug_mask, *, scale?) -> (out, logsumexp, cum_seq_q, cum_seq_k, max_q,
// max_k, philox_seed, philox_offset, debug_attn_mask). Without dropout there is no seed;
// the cumulative sequence lengths and the debug mask are not made (undefined tensors).
bool run_attention(Call& c) {
  at::Tensor q = c.tensor(0), k = c.tensor(1), v = c.tensor(2), mask = c.tensor(3);
  if (c.form().kind != FormKind::FUNCTIONAL || c.arg(4).toDouble() != 0.0 || c.arg(6).toBool())
    return false;
  bool causal = c.arg(5).toBool();
  AttentionArgs a;
  if (!attention_args(c, q, k, v, mask, c.arg(7), &a)) return false;
  at::Tensor out = c.output(0, a.out_shape, q.options());
  at::Tensor lse = c.output(1, a.lse_shape, q.options().dtype(c10::kFloat));
  Desc o, l;
  if (!describe(out, &o) || !describe(lse, &l)) return false;
  const Kernel& kern = *a.kernel;
  if (!c.launch(kern, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_attention_fn>(kern)(&a.q, &a.k, &a.v,
                                                       a.has_mask ? &a.mask : nullptr, causal,
                                                       a.scale, &o, &l, ws, ex);
      }))
    return false;
  c.finish_values({out, lse, at::Tensor(), at::Tensor(), q.size(2), k.size(2), at::Tensor(),
                   at::Tensor(), at::Tensor()});
  return true;
}

// _scaled_dot_product_fused_attention_overrideable_backward(grad_out, q, k, v, attn_bias,
// grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
// philox_seed, philox_offset, *, scale?) -> (grad_q, grad_k, grad_v, grad_attn_bias).
// The bias gradient is not computed here: a call asking for it declines.
bool run_attention_backward(Call& c) {
  at::Tensor go = c.tensor(0), q = c.tensor(1), k = c.tensor(2), v = c.tensor(3),
             mask = c.tensor(4), out = c.tensor(6), lse = c.tensor(7);
  if (c.form().kind != FormKind::FUNCTIONAL || c.arg(12).toDouble() != 0.0) return false;
  auto want = c.arg(5).toBoolList();
  if (want.size() != 4 || (want[3] && mask.defined())) return false;
  bool causal = c.arg(13).toBool();
  AttentionArgs a;
  if (!attention_args(c, q, k, v, mask, c.arg(16), &a)) return false;
  if (!on_device(go, c.device()) || !on_device(out, c.device()) || !on_device(lse, c.device()) ||
      go.scalar_type() != q.scalar_type() || out.scalar_type() != q.scalar_type() ||
      lse.scalar_type() != c10::kFloat || !go.sizes().equals(a.out_shape) ||
      !out.sizes().equals(a.out_shape) || !lse.sizes().equals(a.lse_shape))
    return false;
  at::Tensor gq, gk, gv;
  if (want[0] && !(gq = c.output(0, q.sizes(), q.options())).defined()) return false;
  if (want[1] && !(gk = c.output(1, k.sizes(), k.options())).defined()) return false;
  if (want[2] && !(gv = c.output(2, v.sizes(), v.options())).defined()) return false;
  Desc dgo, dout, dlse, dgq, dgk, dgv;
  if (!describe(go, &dgo) || !describe(out, &dout) || !describe(lse, &dlse)) return false;
  if ((gq.defined() && !describe(gq, &dgq)) || (gk.defined() && !describe(gk, &dgk)) ||
      (gv.defined() && !describe(gv, &dgv)))
    return false;
  const Kernel& kern = *a.kernel;
  if (!c.launch(kern, [&](uint64_t* ws, flagos_native_executor_t** ex) {
        return typed<flagos_native_attention_backward_fn>(kern)(
            &dgo, &a.q, &a.k, &a.v, a.has_mask ? &a.mask : nullptr, &dout, &dlse, causal,
            a.scale, gq.defined() ? &dgq : nullptr, gk.defined() ? &dgk : nullptr,
            gv.defined() ? &dgv : nullptr, ws, ex);
      }))
    return false;
  c.finish({gq, gk, gv, at::Tensor()});
  return true;
}

}  // namespace flagos_native

// Fused ops that torch computes from other ops on PrivateUse1, sent as themselves to a
// kernel provider when their route names one (a vendor kernel library through `native`,
// FlagGems through `gems`):
//
// - rms_norm is CompositeImplicitAutograd: it decomposes into pow/mean/rsqrt/mul above any
//   backend. flagos registers it for AutogradPrivateUse1, where it calls _fused_rms_norm,
//   whose autograd kernel records _fused_rms_norm_backward, as torch does on CUDA, when
//   the route of _fused_rms_norm names a kernel provider; otherwise it decomposes exactly
//   as before. Not for PrivateUse1: rms_norm itself is never routed, so a provider that
//   names aten::rms_norm must not see it as reaching flagos.
// - scaled_dot_product_attention asks the device's _fused_sdp_choice_stub which backend to
//   take; flagos answers `overrideable` (the _scaled_dot_product_fused_attention_overrideable
//   op and its backward) when that op's route names a kernel provider and the call is one a
//   fused kernel can take (no dropout, 4-D, grouped-query heads only with enable_gqa), else
//   `math`, torch's decomposition, as without flagos' answer.
//
// On a device twin with kernels of its own (CUDA), a route that starts with the twin engine
// gets what the twin device runs natively: _fused_rms_norm and its backward as themselves;
// for attention, the backend the twin would choose for the same tensors (cuDNN or
// memory-efficient attention as torch's ops for them, flash attention through the
// overrideable op, engines/twin/twin_attention.h). A CPU twin has none of these kernels.
//
// A provider may still decline a call (its dtypes, layouts): the fused op is then computed
// here from other ops (each routed in turn), so it never reaches the twin or CPU engines,
// which have no kernel for these ops (torch's CPU build has none for the backward ops).
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/core/stack.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_rms_norm_compositeimplicitautograd_dispatch.h>
#include <ATen/ops/rms_norm_compositeimplicitautograd_dispatch.h>
#include <ATen/SDPBackend.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "engines/twin/twin_engine.h"
#include "router/dispatcher.h"

namespace flagos {
namespace {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

const c10::OperatorHandle& fused_rms_norm_op() {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::_fused_rms_norm", "");
  return op;
}
const c10::OperatorHandle& fused_attention_op() {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(
      "aten::_scaled_dot_product_fused_attention_overrideable", "");
  return op;
}

bool on_flagos(const at::Tensor& t) { return t.defined() && t.device().type() == kFlagos; }

// Whether the route of `op` on `device` starts with the twin engine, on a twin with a
// kernel of its own for `op` (CUDA's _fused_rms_norm): the fused op then goes down its
// route, as on the twin device itself.
// Whether the route of `op` on `device` starts with a device twin (not a CPU twin). Asked
// the same way in eager calls and in captures, so a captured step runs the kernels of the
// eager one.
bool starts_on_device_twin(const c10::OperatorHandle& op, c10::DeviceIndex device) {
  auto twin = route_twin(routing_state(op), device);
  return twin && *twin != c10::DeviceType::CPU;
}

bool twin_kernel_first(const c10::OperatorHandle& op, c10::DeviceIndex device) {
  return starts_on_device_twin(op, device) && twin_has_kernel(op, device);
}

// The ops torch's SDPA calls for a backend, looked up once.
const c10::OperatorHandle& efficient_attention_op() {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(
      "aten::_scaled_dot_product_efficient_attention", "");
  return op;
}
const c10::OperatorHandle& cudnn_attention_op() {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(
      "aten::_scaled_dot_product_cudnn_attention", "");
  return op;
}

// The backend to answer where the route of the op torch calls for it starts with a device
// twin: the twin's own choice for these tensors, so that the twin runs the fused kernel it
// runs natively. cuDNN and memory-efficient attention are ops torch calls on any device,
// which their routes send to the twin; flash attention is not (off CUDA torch calls its CPU
// kernel), so it is answered as `overrideable`, which the twin engine runs as flash
// attention (engines/twin/twin_attention.h). -1: none (math).
int64_t twin_backend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& mask, double dropout_p, bool is_causal,
                     std::optional<double> scale, bool enable_gqa) {
  auto device = q.device().index();
  if (!starts_on_device_twin(fused_attention_op(), device) &&
      !starts_on_device_twin(cudnn_attention_op(), device) &&
      !starts_on_device_twin(efficient_attention_op(), device))
    return -1;
  switch (static_cast<at::SDPBackend>(
      twin_sdp_choice(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa))) {
    case at::SDPBackend::flash_attention:
      // The twin's own SDPA pads head sizes to a multiple of 8 first; the twin engine's
      // flash attention takes the tensors as they are.
      if (!mask.defined() && q.size(-1) % 8 == 0 && k.size(-1) % 8 == 0 && v.size(-1) % 8 == 0 &&
          starts_on_device_twin(fused_attention_op(), device) &&
          twin_has_flash_attention(device))
        return static_cast<int64_t>(at::SDPBackend::overrideable);
      return -1;
    case at::SDPBackend::cudnn_attention:
      if (starts_on_device_twin(cudnn_attention_op(), device) && twin_has_kernel(cudnn_attention_op(), device))
        return static_cast<int64_t>(at::SDPBackend::cudnn_attention);
      return -1;
    case at::SDPBackend::efficient_attention:
      if (starts_on_device_twin(efficient_attention_op(), device) &&
          twin_has_kernel(efficient_attention_op(), device))
        return static_cast<int64_t>(at::SDPBackend::efficient_attention);
      return -1;
    default:
      return -1;
  }
}

// Whether a call of the overrideable fused attention (or its backward) goes to the twin
// engine as flash attention: the route starts with a device twin that has it, and the
// call is one flash attention takes (for the forward, the twin's own choice for it).
bool twin_flash_route(const c10::OperatorHandle& op, c10::DeviceIndex device) {
  return starts_on_device_twin(op, device) && twin_has_flash_attention(device);
}

// ---- rms_norm ------------------------------------------------------------------------

at::Tensor rms_norm(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                    const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  auto shape = C10_AS_INTARRAYREF_SLOW(normalized_shape);
  auto device = input.device().index();
  if (on_flagos(input) && (route_has_kernel_provider(fused_rms_norm_op(), device) ||
                           (!traced(input) && twin_kernel_first(fused_rms_norm_op(), device))))
    return std::get<0>(at::_fused_rms_norm(input, shape, weight, eps));
  return at::compositeimplicitautograd::rms_norm(input, shape, weight, eps);
}

// The normalized dimensions (the trailing ones) and the others.
std::pair<std::vector<int64_t>, std::vector<int64_t>> norm_dims(const at::Tensor& input,
                                                                 size_t normalized) {
  std::vector<int64_t> inner, outer;
  int64_t axis = input.dim() - int64_t(normalized);
  for (int64_t d = 0; d < input.dim(); ++d) (d < axis ? outer : inner).push_back(d);
  return {inner, outer};
}

// _fused_rms_norm's backward from other ops, in the input's math type: with xh = x * rstd,
// dx = rstd * (dy * w - xh * mean(dy * w * xh)), dw = sum over the other dims of dy * xh.
std::tuple<at::Tensor, at::Tensor> rms_norm_backward_math(
    const at::Tensor& grad, const at::Tensor& input, at::IntArrayRef normalized_shape,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, std::array<bool, 2> mask) {
  auto math = at::toOpMathType(input.scalar_type());
  auto [inner, outer] = norm_dims(input, normalized_shape.size());
  at::Tensor g = grad.to(math), xh = input.to(math) * rstd.to(math);
  bool has_w = weight && weight->defined();
  at::Tensor gi, gw;
  if (mask[0]) {
    at::Tensor gxh = has_w ? g * weight->to(math) : g;
    gi = (rstd.to(math) * (gxh - xh * (gxh * xh).mean(inner, true))).to(input.scalar_type());
  }
  if (mask[1] && has_w) {
    at::Tensor prod = g * xh;
    gw = (outer.empty() ? prod : prod.sum(outer)).to(weight->scalar_type());
  }
  return {gi, gw};
}

// PrivateUse1 kernels of _fused_rms_norm and its backward: the route's kernel providers,
// else the same result from other ops.
void fused_rms_norm(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                    torch::jit::Stack* stack) {
  auto device = (*stack)[stack->size() - 4].toTensor().device().index();
  if (run_kernel_providers(op, stack, device)) return;
  if (twin_kernel_first(op, device)) return run_routed(op, keys, stack);
  auto args = torch::jit::pop(*stack, 4);
  auto weight = args[2].toOptional<at::Tensor>();
  auto eps = args[3].toOptional<double>();
  auto result = at::compositeimplicitautograd::_fused_rms_norm(
      args[0].toTensor(), args[1].toIntVector(), weight, eps);
  torch::jit::push(*stack, std::get<0>(result), std::get<1>(result));
}

void fused_rms_norm_backward(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                             torch::jit::Stack* stack) {
  auto device = (*stack)[stack->size() - 5].toTensor().device().index();
  if (run_kernel_providers(op, stack, device)) return;
  if (twin_kernel_first(op, device)) return run_routed(op, keys, stack);
  auto args = torch::jit::pop(*stack, 6);
  auto mask_list = args[5].toBoolList();
  std::array<bool, 2> mask{mask_list[0], mask_list[1]};
  auto result = rms_norm_backward_math(args[0].toTensor(), args[1].toTensor(),
                                       args[2].toIntVector(), args[3].toTensor(),
                                       args[4].toOptional<at::Tensor>(), mask);
  torch::jit::push(*stack, std::get<0>(result), std::get<1>(result));
}

// ---- scaled dot-product attention ----------------------------------------------------

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  auto math = static_cast<int64_t>(at::SDPBackend::math);
  if (dropout_p != 0.0 || q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || !on_flagos(q))
    return math;
  int64_t hq = q.size(1), hk = k.size(1);
  if (hq != hk && !(enable_gqa && hk > 0 && hq % hk == 0)) return math;
  if (route_has_kernel_provider(fused_attention_op(), q.device().index()))
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  int64_t twin = twin_backend(q, k, v, mask.value_or(at::Tensor()), dropout_p, is_causal, scale,
                              enable_gqa);
  return twin >= 0 ? twin : math;
}

// Key/value heads repeated for grouped-query attention, and the scores' scale.
at::Tensor repeat_heads(const at::Tensor& t, int64_t hq) {
  return t.size(1) == hq ? t : t.repeat_interleave(hq / t.size(1), 1);
}
double scale_of(const at::Tensor& q, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(double(q.size(-1)));
}

// The masked, scaled scores, in the math type.
at::Tensor scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask,
                  bool is_causal, double scale) {
  auto math = at::toOpMathType(q.scalar_type());
  at::Tensor s = at::matmul(q.to(math), k.to(math).transpose(-2, -1)) * scale;
  if (is_causal) {
    auto keep = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).tril();
    s = s.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity());
  }
  if (mask.defined()) {
    s = mask.scalar_type() == at::kBool
            ? s.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity())
            : s + mask.to(math);
  }
  return s;
}
// exp(s - lse), zero on rows where every key is masked out (lse = -inf).
at::Tensor probabilities(const at::Tensor& s, const at::Tensor& lse) {
  at::Tensor l = lse.unsqueeze(-1);
  return (s - l).exp().masked_fill(l.isneginf(), 0);
}

void fused_attention(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                     torch::jit::Stack* stack) {
  const auto& q0 = (*stack)[stack->size() - 8].toTensor();
  if (run_kernel_providers(op, stack, q0.device().index())) return;
  {
    const auto* a = &(*stack)[stack->size() - 8];
    const at::Tensor& k = a[1].toTensor();
    auto mask = a[3].toOptional<at::Tensor>().value_or(at::Tensor());
    // enable_gqa is not an argument: fewer key/value heads mean it was asked for.
    if (!mask.defined() && !a[6].toBool() && q0.size(-1) % 8 == 0 && k.size(-1) % 8 == 0 &&
        a[2].toTensor().size(-1) % 8 == 0 && twin_flash_route(op, q0.device().index()) &&
        twin_sdp_choice(q0, k, a[2].toTensor(), mask, a[4].toDouble(), a[5].toBool(),
                        a[7].toOptional<double>(), k.size(1) != q0.size(1)) ==
            static_cast<int64_t>(at::SDPBackend::flash_attention))
      return run_routed(op, keys, stack);
  }
  auto args = torch::jit::pop(*stack, 8);
  at::Tensor q = args[0].toTensor(), k = args[1].toTensor(), v = args[2].toTensor();
  at::Tensor mask = args[3].toOptional<at::Tensor>().value_or(at::Tensor());
  TORCH_CHECK(args[4].toDouble() == 0.0 && !args[6].toBool(),
              "flagos: the overrideable fused attention takes neither dropout nor a debug mask");
  int64_t hq = q.size(1);
  at::Tensor s = scores(q, repeat_heads(k, hq), mask, args[5].toBool(),
                        scale_of(q, args[7].toOptional<double>()));
  at::Tensor lse = s.logsumexp(-1);
  at::Tensor out = at::matmul(probabilities(s, lse), repeat_heads(v, hq).to(s.scalar_type()))
                       .to(q.scalar_type());
  torch::jit::push(*stack, out, lse.to(at::kFloat), at::Tensor(), at::Tensor(), q.size(2),
                   k.size(2), at::Tensor(), at::Tensor(), at::Tensor());
}

// A gradient of the repeated heads summed back onto the key/value heads.
at::Tensor sum_heads(const at::Tensor& g, int64_t hk) {
  if (g.size(1) == hk) return g;
  auto sizes = g.sizes().vec();
  sizes[1] = hk;
  sizes.insert(sizes.begin() + 2, g.size(1) / hk);
  return g.reshape(sizes).sum(2);
}

void fused_attention_backward(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                              torch::jit::Stack* stack) {
  const auto& q0 = (*stack)[stack->size() - 16].toTensor();
  if (run_kernel_providers(op, stack, q0.device().index())) return;
  {
    // Where the forward ran as the twin's flash attention: its philox seed is flash
    // attention's (a defined uint64 tensor; flagos' own forward below leaves it undefined).
    const auto* a = &(*stack)[stack->size() - 17];
    const at::Tensor& seed = a[14].toTensor();
    if (seed.defined() && seed.scalar_type() == at::kUInt64 && !a[4].toTensor().defined() &&
        a[12].toDouble() == 0.0 && twin_flash_route(op, q0.device().index()))
      return run_routed(op, keys, stack);
  }
  auto args = torch::jit::pop(*stack, 17);
  at::Tensor go = args[0].toTensor(), q = args[1].toTensor(), k = args[2].toTensor(),
             v = args[3].toTensor(), mask = args[4].toTensor(), out = args[6].toTensor(),
             lse = args[7].toTensor();
  auto want = args[5].toBoolList();
  TORCH_CHECK(args[12].toDouble() == 0.0, "flagos: the overrideable fused attention takes no dropout");
  double scale = scale_of(q, args[16].toOptional<double>());
  int64_t hq = q.size(1), hk = k.size(1);
  auto math = at::toOpMathType(q.scalar_type());
  at::Tensor kx = repeat_heads(k, hq).to(math), vx = repeat_heads(v, hq).to(math);
  at::Tensor p = probabilities(scores(q, kx, mask, args[13].toBool(), scale), lse.to(math));
  at::Tensor g = go.to(math);
  at::Tensor dp = at::matmul(g, vx.transpose(-2, -1));
  at::Tensor ds = p * (dp - (g * out.to(math)).sum(-1, true));
  at::Tensor gq, gk, gv, gb;
  if (want[0]) gq = (at::matmul(ds, kx) * scale).to(q.scalar_type());
  if (want[1]) gk = sum_heads(at::matmul(ds.transpose(-2, -1), q.to(math)) * scale, hk).to(k.scalar_type());
  if (want[2]) gv = sum_heads(at::matmul(p.transpose(-2, -1), g), hk).to(v.scalar_type());
  if (want[3] && mask.defined() && mask.is_floating_point())
    gb = ds.sum_to_size(mask.sizes()).to(mask.scalar_type());
  torch::jit::push(*stack, gq, gk, gv, gb);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("rms_norm", &rms_norm); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_rms_norm", torch::CppFunction::makeFromBoxedFunction<&fused_rms_norm>());
  m.impl("_fused_rms_norm_backward",
         torch::CppFunction::makeFromBoxedFunction<&fused_rms_norm_backward>());
  m.impl("_scaled_dot_product_fused_attention_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&fused_attention>());
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         torch::CppFunction::makeFromBoxedFunction<&fused_attention_backward>());
  for (const char* name : {"_fused_rms_norm", "_fused_rms_norm_backward",
                           "_scaled_dot_product_fused_attention_overrideable",
                           "_scaled_dot_product_fused_attention_overrideable_backward"})
    note_routed_kernel_op(name);
}

}  // namespace flagos

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &flagos::fused_sdp_choice);
}  // namespace at::native

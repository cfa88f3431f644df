#include "engines/twin/conv_layout.h"

#include <ATen/native/ConvUtils.h>
#include <ATen/ops/empty_strided.h>

#include "aten/alias.h"
#include "router/dispatcher.h"

namespace flagos {
namespace {

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

std::vector<int64_t> contiguous(at::IntArrayRef sizes) {
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
bool to_format(at::IntArrayRef sizes, std::vector<int64_t>* strides, at::MemoryFormat fmt) {
  size_t rank = fmt == at::MemoryFormat::ChannelsLast ? 4 : fmt == at::MemoryFormat::ChannelsLast3d ? 5 : 0;
  if (rank && sizes.size() != rank) return false;
  auto probe = at::empty_strided(sizes, *strides, at::TensorOptions().device(c10::kMeta));
  if (probe.is_contiguous(fmt)) return true;
  if (rank == 4) *strides = c10::get_channels_last_strides_2d(sizes);
  else if (rank == 5) *strides = c10::get_channels_last_strides_3d(sizes);
  else *strides = contiguous(sizes);
  return true;
}

}  // namespace

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

bool is_native_batch_norm(const c10::OperatorHandle& op) {
  return &op.operator_name() == known_ops().native_batch_norm;
}

std::optional<ConvLayout> ConvLayout::predict(const c10::OperatorHandle& op,
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
  // No bias comes as None or, from _convolution's overrideable hook, as an undefined
  // tensor (a convolution without bias: every one Inductor emits, ResNet's).
  if (!b.isNone()) {
    if (backward && b.isIntList()) bias_sizes = b.toIntVector();
    else if (!backward && b.isTensor()) {
      if (b.toTensor().defined()) bias = b.toTensor();
    } else {
      return std::nullopt;
    }
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

std::optional<std::vector<int64_t>> ConvLayout::strides(size_t i, at::IntArrayRef sizes) const {
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

}  // namespace flagos

#include "engines/twin/twin_layouts.h"

#include <array>
#include <initializer_list>
#include <optional>

namespace flagos {
namespace {

struct ContiguousArgs {
  const char* op;
  const char* overload;
  std::initializer_list<size_t> args;  // schema positions made contiguous
};

// The ops whose device kernels need contiguous arguments that their composite makes
// contiguous only for device types other than CPU and PrivateUse1 (see the header).
constexpr std::array<ContiguousArgs, 2> kContiguousOnDeviceTwins{{
    {"aten::native_group_norm", "", {0}},              // input
    {"aten::native_group_norm_backward", "", {0, 1}},  // grad_out, input
}};

const std::array<std::optional<c10::OperatorHandle>, kContiguousOnDeviceTwins.size()>& handles() {
  static const auto found = [] {
    std::array<std::optional<c10::OperatorHandle>, kContiguousOnDeviceTwins.size()> h;
    for (size_t i = 0; i < h.size(); ++i) {
      h[i] = c10::Dispatcher::singleton().findSchema(
          {kContiguousOnDeviceTwins[i].op, kContiguousOnDeviceTwins[i].overload});
    }
    return h;
  }();
  return found;
}

}  // namespace

void prepare_twin_layouts(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                          c10::DeviceType twin) {
  if (twin == c10::DeviceType::CPU) return;
  const auto& ops = handles();
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!ops[i] || !(*ops[i] == op)) continue;
    size_t base = stack->size() - op.schema().arguments().size();
    for (size_t a : kContiguousOnDeviceTwins[i].args) {
      auto& v = (*stack)[base + a];
      if (v.isTensor() && v.toTensor().defined() && !v.toTensor().is_contiguous()) {
        v = v.toTensor().contiguous();  // a flagos copy: the caller's tensor is untouched
      }
    }
    return;
  }
}

}  // namespace flagos

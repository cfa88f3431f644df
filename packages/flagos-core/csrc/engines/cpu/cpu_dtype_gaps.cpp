#include "engines/cpu/cpu_dtype_gaps.h"

#include <ATen/ops/empty.h>

#include <array>
#include <atomic>
#include <initializer_list>
#include <optional>

#include "aten/alias.h"

namespace flagos {
namespace {

using c10::ScalarType;

struct Gap {
  const char* op;
  const char* overload;
  std::initializer_list<ScalarType> lacking;  // dtypes the CPU kernel refuses
  ScalarType compute;                         // the dtype it runs in instead
};

constexpr std::initializer_list<ScalarType> kInts = {
    ScalarType::Byte, ScalarType::Char, ScalarType::Short, ScalarType::Int, ScalarType::Long};

// Why each widening is exact:
// - histc on integers: CUDA bins (x - min) * bins / (max - min) in integer arithmetic
//   (floor, x in [min, max]); in double the same quotient is exact for |x| < 2^53 (every
//   int32, and int64 in that range), so every element lands in the same bin, and the
//   counts (integers) convert back exactly. Bounds are taken as given: integral ones (what
//   callers pass for ids) give CUDA's bins; CUDA truncates a fractional bound first.
// - abs on bool: the identity; 0/1 as uint8 and back.
constexpr std::array<Gap, 4> kGaps{{
    {"aten::histc", "", kInts, ScalarType::Double},
    {"aten::histc", "out", kInts, ScalarType::Double},
    {"aten::abs", "", {ScalarType::Bool}, ScalarType::Byte},
    {"aten::abs", "out", {ScalarType::Bool}, ScalarType::Byte},
}};

std::array<std::atomic<uint64_t>, kGaps.size()> g_calls{};

const std::array<std::optional<c10::OperatorHandle>, kGaps.size()>& handles() {
  static const auto found = [] {
    std::array<std::optional<c10::OperatorHandle>, kGaps.size()> h;
    for (size_t i = 0; i < h.size(); ++i) {
      h[i] = c10::Dispatcher::singleton().findSchema({kGaps[i].op, kGaps[i].overload});
    }
    return h;
  }();
  return found;
}

bool lacks(const Gap& gap, const c10::IValue& v) {
  if (!v.isTensor() || !v.toTensor().defined()) return false;
  for (ScalarType s : gap.lacking) {
    if (v.toTensor().scalar_type() == s) return true;
  }
  return false;
}

}  // namespace

bool run_with_cpu_dtype_gaps_closed(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                                    c10::function_ref<void(torch::jit::Stack*)> run) {
  const auto& ops = handles();
  size_t g = 0;
  while (g < ops.size() && !(ops[g] && *ops[g] == op)) ++g;
  if (g == ops.size()) return false;
  const Gap& gap = kGaps[g];
  const auto& arguments = op.schema().arguments();
  size_t n = arguments.size();
  size_t base = stack->size() - n;
  std::optional<ScalarType> original;
  for (size_t i = 0; i < n; ++i) {
    if (lacks(gap, (*stack)[base + i])) original = (*stack)[base + i].toTensor().scalar_type();
  }
  if (!original) return false;
  // out= arguments: the kernel writes a widened temporary, copied into them afterwards.
  std::vector<std::pair<at::Tensor, at::Tensor>> outs;  // (caller's, temporary)
  for (size_t i = 0; i < n; ++i) {
    auto& v = (*stack)[base + i];
    if (!lacks(gap, v)) continue;
    const auto& alias = arguments[i].alias_info();
    at::Tensor t = v.toTensor();
    if (alias && alias->isWrite()) {
      at::Tensor tmp = at::empty({0}, t.options().dtype(gap.compute));
      outs.emplace_back(t, tmp);
      v = tmp;
    } else {
      v = t.to(gap.compute);
    }
  }
  run(stack);
  const auto& returns = op.schema().returns();
  for (size_t i = stack->size() - returns.size(); i < stack->size(); ++i) {
    auto& v = (*stack)[i];
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    const at::Tensor& r = v.toTensor();
    bool is_out = false;
    for (auto& [caller, tmp] : outs) {
      if (!r.is_same(tmp)) continue;
      if (!caller.sizes().equals(tmp.sizes())) caller.resize_(tmp.sizes());
      caller.copy_(tmp);
      v = caller;
      is_out = true;
      break;
    }
    if (!is_out && r.scalar_type() == gap.compute) v = r.to(*original);
  }
  g_calls[g].fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::vector<std::tuple<std::string, std::string, std::string, uint64_t>> cpu_dtype_gap_counts() {
  std::vector<std::tuple<std::string, std::string, std::string, uint64_t>> out;
  for (size_t g = 0; g < kGaps.size(); ++g) {
    std::string name = kGaps[g].op;
    if (kGaps[g].overload[0]) name += std::string(".") + kGaps[g].overload;
    std::string lacking;
    for (ScalarType s : kGaps[g].lacking) {
      lacking += (lacking.empty() ? "" : ",") + std::string(c10::toString(s));
    }
    out.emplace_back(name, lacking, c10::toString(kGaps[g].compute), g_calls[g].load());
  }
  return out;
}

}  // namespace flagos

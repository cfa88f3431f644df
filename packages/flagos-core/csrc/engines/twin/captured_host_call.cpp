#include "engines/twin/captured_host_call.h"

#include <ATen/core/stack.h>
#include <ATen/ops/empty_strided.h>

#include <vector>

#include "aten/alias.h"
#include "capture/capture_state.h"
#include "capture/host_tasks.h"
#include "engines/twin/conv_layout.h"
#include "engines/twin/default_generator.h"
#include "engines/twin/twin_call.h"
#include "router/dispatcher.h"
#include "runtime/resize.h"

namespace flagos {
namespace {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

bool on_flagos(const at::Tensor& t) { return t.defined() && t.device().type() == kFlagos; }

// `v` with each defined tensor passed to `f` (lists included) and flagos devices as `device`.
template <typename F>
c10::IValue map_tensors(const c10::IValue& v, F f, c10::Device device) {
  if (v.isTensor()) return v.toTensor().defined() ? c10::IValue(f(v.toTensor())) : v;
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      out.push_back(t && t->defined() ? std::optional<at::Tensor>(f(*t)) : t);
    }
    return out;
  }
  if (v.isDevice() && v.toDevice().type() == kFlagos) return device;
  return v;
}

// A flagos tensor's geometry on meta, for the op's meta kernel; other tensors as they are.
at::Tensor as_meta(const at::Tensor& t) {
  if (!on_flagos(t)) return t;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

at::Tensor as_host(const at::Tensor& t) { return alias_as(t, c10::Device(c10::kCPU)); }

// What a task keeps of a tensor argument: a flagos tensor as a CPU alias of its memory,
// another tensor (a CPU number) copied, a constant of the graph as CUDA's scalar arguments
// are. A task never holds a tensor Python knows: dropping it on the stream's worker would
// need the GIL, which a thread waiting for the stream may hold.
at::Tensor host_argument(const at::Tensor& t) { return on_flagos(t) ? as_host(t) : t.clone(); }

bool writes(const c10::Argument& arg) { return arg.alias_info() && arg.alias_info()->isWrite(); }

}  // namespace

void record_host_twin_call(const c10::OperatorHandle& requested, torch::jit::Stack* stack,
                           c10::DeviceIndex device) {
  const c10::OperatorHandle& op = native_equivalent(requested, stack);
  const std::string name = op_full_name(op);
  TORCH_CHECK(capture::host_tasks_available(device), "flagos: ", name, " on flagos:", int(device),
              " cannot be captured: it runs on the host, and the device's HAL runs no host "
              "work on a stream (stream_launch_host_task, flagos_hal.h ABI 1.4)");
  const auto& arguments = op.schema().arguments();
  const auto& returns = op.schema().returns();
  size_t n = arguments.size();
  std::vector<c10::IValue> args(stack->end() - n, stack->end());
  torch::jit::drop(*stack, n);

  // What the op returns, without running it: its meta kernel on tensors of the same
  // geometry. A result that is a written argument (in-place, out=) is that argument.
  torch::jit::Stack meta;
  std::vector<at::Tensor> meta_args(n);
  for (size_t i = 0; i < n; ++i) {
    if (is_optional_generator(arguments[i])) {
      meta.emplace_back();
      continue;
    }
    c10::IValue m = map_tensors(args[i], as_meta, c10::Device(c10::kMeta));
    if (m.isTensor()) meta_args[i] = m.toTensor();
    meta.push_back(std::move(m));
  }
  try {
    op.callBoxed(&meta);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "flagos: ", name, " cannot be captured on flagos:", int(device),
                ": its results' shapes must be known before it runs, and its meta kernel "
                "failed: ", e.what_without_backtrace());
  }
  TORCH_CHECK(meta.size() == returns.size(), "flagos: ", name, " returned ", meta.size(),
              " values on meta, its schema says ", returns.size());
  // Each returned meta tensor becomes: the written argument it is (resized as the kernel
  // will resize it), a view of the argument whose storage it shares, or a fresh flagos
  // tensor the task copies the kernel's result into at every replay.
  std::vector<at::Tensor> fresh_results;  // in the order the task meets them
  auto map_result = [&](const at::Tensor& mt) -> at::Tensor {
    for (size_t i = 0; i < n; ++i) {
      if (!meta_args[i].defined()) continue;
      const at::Tensor& t = args[i].toTensor();
      if (mt.is_same(meta_args[i]) && writes(arguments[i])) {
        if (!t.sizes().equals(mt.sizes()) || !t.strides().equals(mt.strides())) {
          size_t needed = mt.numel() == 0 ? 0
              : at::detail::computeStorageNbytes(mt.sizes(), mt.strides(), mt.element_size(),
                                                 t.storage_offset());
          if (needed > t.storage().nbytes()) resize_storage_bytes(t.storage(), needed);
          t.unsafeGetTensorImpl()->set_sizes_and_strides(mt.sizes(), mt.strides(),
                                                         t.storage_offset());
        }
        return t;
      }
      if (mt.storage().is_alias_of(meta_args[i].storage())) {  // a view: the meta input
        return t.as_strided(mt.sizes(), mt.strides(),  // starts at its storage's offset 0
                            t.storage_offset() + mt.storage_offset());
      }
    }
    at::Tensor out = at::empty_strided(mt.sizes(), mt.strides(),
                                       mt.options().device(c10::Device(kFlagos, device)));
    fresh_results.push_back(out);
    return out;
  };
  std::vector<c10::IValue> results(returns.size());
  std::vector<bool> fresh_slot(returns.size(), false);
  for (size_t r = 0; r < returns.size(); ++r) {
    const c10::IValue& m = meta[r];
    if (m.isTensor()) {
      size_t before = fresh_results.size();
      results[r] = map_result(m.toTensor());
      fresh_slot[r] = fresh_results.size() > before;
    } else if (m.isTensorList()) {
      c10::List<at::Tensor> list;
      size_t before = fresh_results.size();
      for (const at::Tensor& mt : m.toTensorList()) list.push_back(map_result(mt));
      TORCH_CHECK(fresh_results.size() == before || fresh_results.size() == before + list.size(),
                  "flagos: ", name, " cannot be captured on flagos:", int(device),
                  ": it returns a list mixing its arguments and new tensors");
      fresh_slot[r] = fresh_results.size() > before;
      results[r] = list;
    } else {
      TORCH_CHECK(m.isNone() || m.isScalar() || m.isBool() || m.isInt(), "flagos: ", name,
                  " cannot be captured on flagos:", int(device), ": it returns a ", m.tagKind(),
                  ", and a captured host kernel returns tensors");
      results[r] = m;
    }
  }

  // The task holds CPU aliases that keep the flagos storages alive while the graph does.
  std::vector<c10::IValue> host_args;
  for (size_t i = 0; i < n; ++i) {
    host_args.push_back(map_tensors(args[i], host_argument, c10::Device(c10::kCPU)));
  }
  std::vector<at::Tensor> host_results;
  for (const at::Tensor& t : fresh_results) host_results.push_back(as_host(t));
  bool draws = draws_from_default_generator(op);
  c10::Device twin(c10::kCPU);
  capture::queue_host_task(device, name, [op, host_args, host_results, fresh_slot, draws,
                                          device, twin, arguments]() {
    torch::jit::Stack s;
    for (size_t i = 0; i < host_args.size(); ++i) {
      if (is_optional_generator(arguments[i])) {
        auto gen = twin_generator_for(
            host_args[i].isNone() ? std::nullopt : std::optional(host_args[i].toGenerator()),
            device, c10::kCPU);
        s.push_back(gen ? c10::IValue(*gen) : c10::IValue());
      } else {
        s.push_back(host_args[i]);
      }
    }
    {
      std::optional<DefaultGeneratorLent> rng;
      if (draws) rng.emplace(device, twin);
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &s);
    }
    size_t k = 0;  // the fresh results, in the order map_result made them
    for (size_t r = 0; r < fresh_slot.size(); ++r) {
      if (!fresh_slot[r]) continue;
      if (s[r].isTensor()) {
        host_results[k++].copy_(s[r].toTensor());
      } else {
        for (const at::Tensor& t : s[r].toTensorList()) host_results[k++].copy_(t);
      }
    }
  });
  for (auto& v : results) stack->push_back(std::move(v));
}

}  // namespace flagos

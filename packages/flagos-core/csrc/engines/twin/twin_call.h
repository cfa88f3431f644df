// One op call run by the twin engine: each flagos tensor argument is aliased as a tensor
// of the HAL's native twin device (zero-copy, see aten/alias.h), the twin's kernel runs on
// the aliases, and the results are mapped back: the caller's own tensors for in-place and
// out= results, flagos views for views, flagos tensors (flagos memory) for fresh results.
//
// Used boxed by the twin and cpu engines (twin_engine.cpp, engines/cpu/cpu_engine.cpp) and
// unboxed (no IValue stack) by the fast kernels of hot ops (fast_kernels.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <string>
#include <vector>

#include "aten/alias.h"
#include "engines/twin/conv_layout.h"
#include "engines/twin/device_results.h"
#include "engines/twin/host_results.h"

namespace flagos {

// Random ops on a native device draw from the flagos generator's inner generator for it
// (the device's default flagos generator when none is given).
std::optional<at::Generator> twin_generator_for(const std::optional<at::Generator>& gen,
                                                c10::DeviceIndex device, c10::DeviceType twin);
bool is_optional_generator(const c10::Argument& arg);

// Extension ops (not aten::) whose twin kernels allocate only through tensor factories
// (at::empty, torch.empty, ATen ops), never Allocator::raw_allocate, declared by their
// package ("ns::name", every overload): on a device twin their results are then made in
// flagos memory as ATen ops' are, instead of being copied (engines/twin/device_results.h).
void allow_device_results_for(const std::string& op);
bool device_results_allowed(const c10::OperatorHandle& op);

class TwinCall {
 public:
  // At most this many distinct tensor arguments in an unboxed call (their aliases must not
  // move while the kernel holds references to them).
  static constexpr size_t kMaxUnboxedTensors = 8;

  // `op`: the op being run, for error messages (boxed calls set it themselves).
  TwinCall(c10::DeviceIndex device, c10::DeviceType twin,
           const c10::OperatorHandle* op = nullptr)
      : op_(op), device_(device), twin_(twin) {}

  // Boxed: runs `op` on the stack's arguments; the stack then holds the flagos results.
  void run(const c10::OperatorHandle& op, torch::jit::Stack* stack);

  // A boxed kernel run on the twin aliases: it replaces the op's arguments on the stack by
  // its results, or returns false (stack untouched) to decline the call.
  using BoxedTwinKernel = c10::function_ref<bool(const c10::OperatorHandle&, torch::jit::Stack*)>;
  // Boxed, with a kernel of another source than the twin's dispatch table (a Python kernel
  // library, see engines/python/foreign_kernels.h): the same aliases, stream, kernel scope and
  // mapping of results as run(). When the kernel declines, the stack holds `op`'s original
  // arguments again and false is returned.
  bool run_with(const c10::OperatorHandle& op, torch::jit::Stack* stack, BoxedTwinKernel kernel);

  // Unboxed, in this order: alias() every tensor argument; enter(); run the kernel on the
  // aliases with twin_keys() inside a KernelScope, which stays until the results are mapped:
  // finish(); original_of / from_twin. The caller's tensors are borrowed, not copied: copying a
  // tensor that Python holds takes the GIL twice (torch's PyObject preservation).
  // `mutable_arg`: the kernel may write, resize or restride it (a Tensor& argument); only
  // those are checked after the kernel (finish). Boxed calls check every argument.
  at::Tensor& alias(const at::Tensor& t, bool mutable_arg);
  std::optional<at::Tensor> alias(const std::optional<at::Tensor>& t) {
    return t ? std::optional<at::Tensor>(alias(*t, false)) : std::nullopt;
  }
  std::optional<at::Generator> generator(const std::optional<at::Generator>& gen) const {
    return twin_generator_for(gen, device_, twin_);
  }
  void enter();
  c10::DispatchKeySet twin_keys() const;
  // What must surround the kernel and the mapping of its results: the kernel's allocations
  // come from flagos memory and its results are adopted inside the scope, on a CPU twin
  // (engines/twin/host_results.h) and, where flagos was built against a torch with CUDA, on a CUDA
  // twin (engines/twin/device_results.h).
  class KernelScope {
   public:
    explicit KernelScope(const TwinCall& call);

   private:
    std::optional<HostResultsOnFlagos> host_results_;
    std::optional<DeviceResultsOnFlagos> device_results_;
  };
  void finish() { fix_mutated(); }
  // The caller's tensor behind an alias that a kernel returned (in-place and out= ops).
  at::Tensor& original_of(const at::Tensor& alias);
  // A kernel's result as a flagos tensor. `want`: the strides a fresh result must have (a
  // convolution's, see ConvLayout); nullopt keeps the kernel's.
  at::Tensor from_twin(const at::Tensor& t, const std::vector<int64_t>* want = nullptr);

 private:
  // The index in aliases_ of flagos tensor `t`'s alias, made if new.
  size_t alias_index(const at::Tensor& t, bool borrow);
  at::Tensor to_twin(const at::Tensor& t, bool borrow);
  c10::IValue to_twin(const c10::IValue& v, const c10::Argument& arg);
  c10::IValue from_twin(const c10::IValue& v);
  c10::DeviceIndex twin_index(c10::DeviceIndex flagos_device) const;
  void fix_mutated();

  const c10::OperatorHandle* op_;
  std::optional<ConvLayout> conv_layout_;
  c10::DeviceIndex device_;
  c10::DeviceType twin_;
  uint64_t devices_ = 0;  // bit d: flagos:d is involved
  uint32_t mutable_ = 0;  // bit k: aliases_[k] is a mutable argument (unboxed calls)
  bool boxed_ = false;    // a boxed call: every alias is checked after the kernel
  // The caller's tensor behind each alias: borrowed (unboxed calls; the caller's own
  // object, so that a Tensor& result refers to it) or owned (boxed calls, whose stack
  // slots the aliases replace).
  struct Original {
    const at::Tensor* borrowed = nullptr;
    at::Tensor owned;
    const at::Tensor& get() const { return borrowed ? *borrowed : owned; }
  };
  c10::SmallVector<Original, kMaxUnboxedTensors> originals_;
  c10::SmallVector<at::Tensor, kMaxUnboxedTensors> aliases_;
  // On a device twin, the kernel and the copies that map results back run on the twin
  // stream under the current flagos stream, in order (from enter() to the end of the call).
  std::optional<TwinStreamGuard> on_flagos_stream_;
};

}  // namespace flagos

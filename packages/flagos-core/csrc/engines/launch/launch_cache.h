// The launch cache: a Python kernel whose call is a few launches of compiled kernels (a
// Triton kernel's wrapper: check, allocate the results, launch) relaunched from C++ on
// later calls with the same argument metadata, without Python.
//
// An op is registered for one dispatch key with its Python kernel: PrivateUse1, where the
// kernel runs on flagos tensors, or a twin device's (CUDA), where it runs on twin views of
// flagos memory; either way its launches go through the HAL's kernel extension
// (hal_kernels.h, record_hal_launch), on the current flagos stream, which on the twin is
// its current stream too (a launch while it is another is not kept, and a kept one is not
// relaunched then). The boxed C++ kernel put in its place keys each call by its
// arguments' metadata: each tensor's dtype, device, sizes, strides and 16-byte alignment,
// every other argument's value (calls with other argument kinds always run the Python
// kernel). A key seen before with recorded launches is relaunched: results allocated as
// recorded (at::empty_strided, so that the twin's result scopes serve them), temporaries
// from the flagos allocator (flagos tensors only), then the kernels launched in order on
// the current stream with the recorded grids, blocks, shared memory and parameters, each
// a constant, the data pointer of an argument or result, or a pointer into a temporary. Otherwise the Python
// kernel runs while a recording is open on the thread (and the flagos allocator logs the
// device memory it allocates); its launches (at most 16) are kept for the key when each
// pointer is the data pointer of exactly one argument or result or, through the HAL, lies
// in exactly one block the kernel allocated that is no result, and its results are fresh.
//
// Registering an op states that its Python kernel is such a function of its arguments'
// metadata: the launches (grids, constants) and the results' shapes depend on nothing
// else, and the launches are the whole of its device work. A call that launches otherwise
// than through the HAL spoils its recording (flagos.launch_cache.spoil_recording), as
// flagos' copy, fill and zero kernels and a routed op run by the CPU fallback, the twin or
// an external library do whenever a recording is open.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engines/launch/hal_kernels.h"
#include "engines/python/python_engine.h"

namespace flagos {

// Puts the cached kernel in place of `op` ("ns::name" or "ns::name.overload", defined
// already) for `dispatch_key` ("PrivateUse1" or "CUDA"), `kernel` its Python kernel (called as
// torch calls a torch.library kernel). Once per op and key.
void register_launch_cached_op(const std::string& op, const std::string& dispatch_key,
                               const PyObjectRef& kernel);

// The kept launches of one op's calls, by their key.
struct LaunchTable;

// The launch cache's call of `op` at the top of `stack`: kept launches relaunched from C++
// where the call's key has some, else `python` (which runs the call on the stack and
// returns false to decline it) with a recording open, and what it launched kept. False
// when `python` declined (the stack then untouched).
bool run_launch_cached(LaunchTable& table, const c10::OperatorHandle& op,
                       torch::jit::Stack* stack, c10::function_ref<bool()> python);

// A Python provider's ops whose calls may be relaunched (Provider.replayable_ops): its
// kernel for each is, by the provider's statement, a function of the arguments' metadata
// whose device work is its launches through the HAL, as for a registered op.
class ProviderLaunches {
 public:
  explicit ProviderLaunches(const std::vector<std::string>& ops);  // "aten::add.Tensor"
  // The table of `op`, or nullptr where the provider did not name it.
  LaunchTable* table(const c10::OperatorHandle& op) const;

 private:
  std::unordered_map<c10::OperatorName, std::shared_ptr<LaunchTable>> tables_;
};

// One parameter of a recorded launch: its C type's size in bytes and its bits, a pointer
// being resolved to an argument or result when the launch is kept. A tensor descriptor
// passed by value (`descriptor`, its base the pointer `bits`) is kept as what the HAL
// encoded it from and encoded again at each relaunch, with that launch's address.
struct LaunchParam {
  bool pointer;
  uint8_t bytes;  // 1, 2, 4 or 8
  uint64_t bits;
  std::shared_ptr<const flagos_tensor_descriptor_info_t> descriptor = nullptr;
};

// Records a launch through the HAL the running Python kernel makes (`l`, a kernel of a
// module loaded on flagos:l.device); false when no recording is open on this thread.
// `keepalive` is held as long as the launch is kept (the module owning the kernel). A
// launch on another stream than the current one is not kept (a relaunch runs on the
// current stream).
bool record_hal_launch(const KernelLaunch& l, std::vector<LaunchParam> params,
                       const PyObjectRef& keepalive, bool on_current_stream);

// Parameters as Python gives them, (is_pointer, bytes, bits); raises for a size that is
// not 1, 2, 4 or 8.
std::vector<LaunchParam> launch_params(const std::vector<std::tuple<bool, int, uint64_t>>& params);

// Whether the running Python kernel is being recorded (on this thread).
bool launch_recording();
// The flagos device whose kernels a launch-cached op's call on `device` launches now, as
// it would be kept: flagos:N itself, or the flagos device whose twin `device` is while the
// twin's current stream is that device's current stream; -1 where none.
c10::DeviceIndex hal_device_for(c10::Device device);
// The running Python kernel did device work besides its recorded launches (an ATen op
// that computes), or something else that keeps them from being kept, `why` (a string that
// lives as long as the process; nullptr: device work besides its launches): its launches
// are not kept.
void spoil_launch_recording(const char* why = nullptr);

struct LaunchCacheStats {
  int64_t relaunched = 0;  // calls run from C++
  int64_t python = 0;      // calls that ran the Python kernel
  int64_t kept = 0;        // calls whose launches were kept
  int64_t unkeyed = 0;     // calls whose arguments cannot be keyed
};
LaunchCacheStats launch_cache_stats();
// Recorded calls not kept, by why (the first reason each met), since start.
std::vector<std::pair<std::string, int64_t>> launch_cache_not_kept();
// Drops every kept launch (the next call of each key runs Python again).
void clear_launch_cache();
void set_launch_cache_enabled(bool enabled);
bool launch_cache_enabled();

}  // namespace flagos

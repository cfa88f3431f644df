// Kernels of a foreign kernel library (Python functions, e.g. FlagGems' Triton kernels)
// run on flagos tensors by the twin engine's machinery: each flagos tensor argument is
// aliased as a tensor of the HAL's native twin device without a copy (aten/alias.h), the
// twin device and the twin stream under the current flagos stream are made current
// (TwinStreamGuard), the kernel's own allocations land in flagos memory (the kernel scope,
// engines/twin/host_results.h and engines/twin/device_results.h), and its results are mapped back exactly
// as for a twin kernel (the caller's tensors for in-place and out=, flagos views for views,
// adopted flagos tensors for fresh results). See engines/twin/twin_call.h.
//
// A provider of this kind is registered with a kernel resolver, a Python callable
// resolver(op_name) -> kernel or None, asked once per op and resolver (never per call).
// The kernel is called as kernel(*args, **kwargs) with the op's schema arguments (the
// aliases in place of flagos tensors, the twin device for a flagos device argument, the
// twin generator for a generator argument) and returns the op's results on the twin, or
// NotImplemented to decline the call (the next provider of the chain runs; the caller's
// arguments are untouched). A resolver that returns None declines every call of that op.
// A kernel that raises on an op that writes none of its arguments and draws no random
// numbers declines the call too (warned once per op); on other ops, and for out of memory,
// the error reaches the caller.
// On a device twin, a call with a tensor argument in host memory (a CPU scalar tensor) is
// declined before the kernel is asked: the library's device kernels cannot read it.
//
// Without a twin (opaque memory, FLAGOS_NO_TWIN=1) the kernel gets the flagos tensors
// themselves: a library loaded for flagos devices (its device object torch.flagos, its
// Triton kernels launched through the HAL) allocates on flagos and launches on the current
// flagos stream. Its provider names the HALs it serves so; a call of the op the kernel is
// running, made again from inside it on flagos tensors (a wrapper's fallback to ATen),
// goes to the next provider of the route.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "engines/python/python_bridge.h"

namespace flagos {

struct LaunchTable;

// Runs `op` on flagos:`device` with the kernel that `resolver` gives for it; false when the
// kernel (or the resolver) declines the call, the stack then unchanged. `replay`: where the
// provider declared `op` replayable, its kept launches; a call on flagos tensors (no twin)
// is then relaunched from C++ where one with its key was recorded (launch_cache.h). Calls
// on twin aliases launch through the twin's own driver, which records nothing.
bool run_foreign(const PyObjectRef& resolver, const c10::OperatorHandle& op,
                 torch::jit::Stack* stack, c10::DeviceIndex device, LaunchTable* replay);

}  // namespace flagos

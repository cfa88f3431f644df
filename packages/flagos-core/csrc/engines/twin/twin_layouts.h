// Argument layouts a device twin's kernel requires where torch's composite prepares them
// for PrivateUse1 as it does for the CPU.
//
// Some composites lay arguments out per device type before calling the backend kernel:
// group_norm passes `input.contiguous(suggest_memory_format())` to native_group_norm on
// the CPU and PrivateUse1 (channels_last stays channels_last) but `input.contiguous()` on
// CUDA, whose kernel checks for that (and whose backward reads its inputs as contiguous).
// A flagos op therefore reaches a CUDA twin kernel with a layout CUDA's own callers never
// pass. The twin engine makes such arguments contiguous on a device twin, as the
// composite would have for the twin's device type; a CPU twin takes them as they are.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace flagos {

// Before a boxed twin call of `op` on a `twin` device: replaces the stack's listed
// arguments of the ops in the table (twin_layouts.cpp) by contiguous flagos tensors.
void prepare_twin_layouts(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                          c10::DeviceType twin);

}  // namespace flagos

// Flash attention on a device twin (CUDA): torch's SDPA calls flash attention only on
// CUDA tensors (elsewhere its CPU kernel), so where the twin would take flash attention
// flagos answers `overrideable` (router/fused_ops.cpp), and the twin engine runs the
// overrideable op and its backward as the twin's _scaled_dot_product_flash_attention
// (_backward) on the aliases: the kernels plain CUDA runs, instead of the ten or so ops of
// the decomposition. (cuDNN and memory-efficient attention need nothing here: torch calls
// their ops on any device, and their routes bring them to the twin.)
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace flagos {

// When `op` is the overrideable fused attention or its backward, runs it on the twin's
// flash-attention kernels on aliases of the stack's arguments and returns true; false
// (stack untouched) for any other op.
bool run_twin_attention(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                        c10::DeviceIndex device, c10::DeviceType twin);

}  // namespace flagos

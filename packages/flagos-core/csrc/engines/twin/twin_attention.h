// Fused ops on a device twin with kernels of its own for them (CUDA): scaled dot-product
// attention as the twin's flash attention. PrivateUse1 has no flash-attention op of its own
// that torch's SDPA would call, so flagos answers `overrideable` (router/fused_ops.cpp), and
// the twin engine runs the overrideable op and its backward as the twin's
// _scaled_dot_product_flash_attention(_backward) on the aliases: the kernels plain CUDA
// runs, instead of the ten or so ops of the decomposition.
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

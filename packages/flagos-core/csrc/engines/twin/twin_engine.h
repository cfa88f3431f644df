// The twin engine: what the `boxing` provider runs. Each flagos tensor argument is aliased
// without a copy as a tensor of the HAL's native twin device (CPU for sim, CUDA for a
// CUDA-addressable HAL), the twin's own kernel runs, and its results are mapped back
// (twin_call.h). Its parts, all in this folder: one call on aliases (twin_call), unboxed
// kernels of hot ops (fast_kernels.cpp), layouts a device twin's kernels need
// (twin_layouts), convolution result layouts (conv_layout), results made in flagos memory
// (host_results for a CPU twin, device_results for a CUDA twin), and the default
// generator lent to random kernels (default_generator).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>

#include "engines/twin/default_generator.h"
#include "engines/twin/twin_call.h"

namespace flagos {

// Runs `op` on `stack` by the twin engine; an error names the op when flagos:`device` has
// no twin (opaque memory).
void run_twin(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device);

// Whether the twin of flagos:`device` has a kernel of its own for `op` (CUDA has one for
// _fused_rms_norm; the CPU none): the router then sends fused ops to the twin rather than
// computing them from other ops.
bool twin_has_kernel(const c10::OperatorHandle& op, c10::DeviceIndex device);
// Whether the twin of flagos:`device` computes this scaled dot-product attention with a
// flash-attention kernel of its own, as the twin device itself would choose (its
// _fused_sdp_choice on aliases): no mask, no dropout, a head size the kernel takes. The
// twin engine then serves the overrideable fused attention and its backward with it
// (twin_attention.h).
bool twin_takes_flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                double dropout_p, bool is_causal, std::optional<double> scale,
                                bool enable_gqa);

}  // namespace flagos

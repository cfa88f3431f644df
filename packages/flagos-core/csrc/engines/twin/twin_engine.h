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

// Whether `t` is a tensor of torch.compile's tracing (fake or functional): no memory to
// alias, so nothing is asked of the twin for it.
bool traced(const at::Tensor& t);
// Whether the twin of flagos:`device` has a kernel of its own for `op` (CUDA has one for
// _fused_rms_norm; the CPU none): the router then sends fused ops to the twin rather than
// computing them from other ops.
bool twin_has_kernel(const c10::OperatorHandle& op, c10::DeviceIndex device);
// Whether the twin of flagos:`device` has flash-attention kernels (forward and backward)
// the twin engine can serve the overrideable fused attention with (twin_attention.h).
bool twin_has_flash_attention(c10::DeviceIndex device);
// The fused attention backend (at::SDPBackend as an int) the device twin of q's flagos
// device would take for these tensors, asked through its own _fused_sdp_choice on aliases;
// -1 where it cannot be asked: a CPU twin, tensors of torch.compile's tracing (no memory
// to alias), or a choice that fails (every backend turned off with sdpa_kernel).
int64_t twin_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& mask, double dropout_p, bool is_causal,
                        std::optional<double> scale, bool enable_gqa);

}  // namespace flagos

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

#include "engines/twin/default_generator.h"
#include "engines/twin/twin_call.h"

namespace flagos {

// Runs `op` on `stack` by the twin engine; an error names the op when flagos:`device` has
// no twin (opaque memory).
void run_twin(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device);

}  // namespace flagos

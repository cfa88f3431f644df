// The CPU fallback engine: what the `cpu` provider runs, and the last link of every route.
// Any op on any HAL: on host-addressable memory the twin engine on the CPU, on opaque
// memory copies to the CPU and back. Dtypes that CPU kernels lack are computed wider
// (cpu_dtype_gaps.h), for this engine and for the twin engine on a CPU twin.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "engines/cpu/cpu_dtype_gaps.h"

namespace flagos {

void run_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex device);

}  // namespace flagos

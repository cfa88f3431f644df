// Dtypes that a CPU kernel lacks and accelerators' kernels have, computed in a wider dtype.
//
// On sim and on opaque HALs the cpu and twin engines run the CPU's kernels. Library code
// written for accelerators assumes that a device that is not the CPU has CUDA's dtype
// support: transformers' MoE routing calls torch.histc on int32 expert ids (casting to
// float only when `device.type == "cpu"`), which CUDA's kernel counts and the CPU's
// refuses ("histogram_cpu" not implemented for 'Int'). For the ops listed in
// cpu_dtype_gaps.cpp, an argument of a lacking dtype is cast to a dtype the CPU kernel
// has, the kernel runs, and results of that dtype are cast back (out= arguments get the
// result copied in): only where that computes exactly what the accelerator's kernel does.
// Each widened call is counted (cpu_dtype_gap_counts, flagos.routing.cpu_dtype_gaps()).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/FunctionRef.h>

#include <string>
#include <tuple>
#include <vector>

namespace flagos {

// Runs `op` through `run` on CPU kernels with its lacking-dtype arguments widened, and
// returns true; returns false (stack untouched) when `op` is not listed or none of its
// arguments has a dtype the CPU kernel lacks.
bool run_with_cpu_dtype_gaps_closed(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                                    c10::function_ref<void(torch::jit::Stack*)> run);

// (op, lacking dtypes, computed in, calls so far), one per listed op.
std::vector<std::tuple<std::string, std::string, std::string, uint64_t>> cpu_dtype_gap_counts();

}  // namespace flagos

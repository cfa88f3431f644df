// The twin engine on a CPU twin while the current stream captures a graph: the op is not
// run on the calling thread (a replay would not repeat it) but queued on the stream as a
// host task (capture/host_tasks.h) that runs its CPU kernel on aliases of the flagos
// memory, at every replay. The results' shapes come from the op's meta kernel, and they
// are allocated now (from the graph's pool), so the code after the op can use them.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace flagos {

void record_host_twin_call(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                           c10::DeviceIndex device);

}  // namespace flagos

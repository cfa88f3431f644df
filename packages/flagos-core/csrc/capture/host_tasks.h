// Host work queued on a flagos stream, for devices whose memory the host addresses (a HAL
// whose native device is the CPU, as the simulated device): the stream's worker runs it in
// order with the stream's kernels and copies, and a capture records it, so the CPU kernels
// that serve such a device (the twin engine on a CPU twin, fills, copies) become part of a
// graph instead of running on the calling thread. The stream's native handle is then a
// flagos_hal_sim_stream_t (flagos_hal/sim_runtime.h) with launch_host_task.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <string>

namespace flagos {
namespace capture {

// Whether the current stream of flagos:`device` runs host tasks.
bool host_tasks_available(c10::DeviceIndex device);

// Queues `task` on the current stream of flagos:`device` (recorded while it captures: then
// it runs at every replay). `what` names the work in the warning a failing run gives: a
// task runs on the stream's worker, where nobody can catch what it throws.
void queue_host_task(c10::DeviceIndex device, std::string what, std::function<void()> task);

}  // namespace capture
}  // namespace flagos

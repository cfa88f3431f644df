// Host work queued on a flagos stream through the HAL's host tasks (flagos_hal.h ABI 1.4,
// stream_launch_host_task), for devices whose memory the host addresses (the simulated
// device): it runs in order with the stream's kernels and copies, and a capture records
// it, so the CPU kernels that serve such a device (the twin engine on a CPU twin, fills,
// copies) become part of a graph instead of running on the calling thread.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <string>

namespace flagos {
namespace capture {

// Whether flagos:`device`'s HAL runs host tasks.
bool host_tasks_available(c10::DeviceIndex device);

// Queues `task` on the current stream of flagos:`device` (recorded while it captures: then
// it runs at every replay). `what` names the work in the warning a failing run gives: a
// task runs on the stream's worker, where nobody can catch what it throws.
void queue_host_task(c10::DeviceIndex device, std::string what, std::function<void()> task);

}  // namespace capture
}  // namespace flagos

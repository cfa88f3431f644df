#include "capture/host_tasks.h"

#include <c10/util/Exception.h>

#include "runtime/hal.h"
#include "runtime/hal_raise.h"
#include "runtime/stream.h"

namespace flagos {
namespace capture {
namespace {

struct HostTask {
  std::string what;
  std::function<void()> run;
};

void run_task(void* data) {
  auto* task = static_cast<HostTask*>(data);
  try {
    task->run();
  } catch (const std::exception& e) {
    TORCH_WARN("flagos: ", task->what, " failed on the stream: ", e.what());
  }
}

void release_task(void* data) { delete static_cast<HostTask*>(data); }

}  // namespace

bool host_tasks_available(c10::DeviceIndex device) {
  return FLAGOS_HAL_HAS(&hal_of(device), stream_launch_host_task);
}

void queue_host_task(c10::DeviceIndex device, std::string what, std::function<void()> task) {
  const auto& hal = hal_of(device);
  TORCH_CHECK(FLAGOS_HAL_HAS(&hal, stream_launch_host_task), "flagos: ", what, " on flagos:",
              int(device), " runs on the host, and its HAL '", hal_device(device).lib->name,
              "' runs no host work on a stream (stream_launch_host_task, flagos_hal.h ABI 1.4)");
  auto* held = new HostTask{std::move(what), std::move(task)};
  flagos_status_t st = hal.stream_launch_host_task(hal_stream(current_stream(device)), &run_task,
                                                   held, &release_task);  // releases `held`
  if (st != FLAGOS_SUCCESS) FLAGOS_HAL_RAISE(hal, st, "stream_launch_host_task");
}

}  // namespace capture
}  // namespace flagos

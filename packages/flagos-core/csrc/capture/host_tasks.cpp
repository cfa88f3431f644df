#include "capture/host_tasks.h"

#include <c10/util/Exception.h>

#include <cstddef>

#include "flagos_hal/sim_runtime.h"
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

const flagos_hal_sim_stream_t* runtime_stream(c10::DeviceIndex device) {
  if (native_device_of(device) != FLAGOS_NATIVE_CPU) return nullptr;
  const auto& t = hal_of(device);
  if (!FLAGOS_HAL_HAS(&t, stream_get_native_handle)) return nullptr;
  void* handle = nullptr;
  if (t.stream_get_native_handle(hal_stream(current_stream(device)), &handle) != FLAGOS_SUCCESS ||
      !handle) {
    return nullptr;
  }
  auto* rs = static_cast<const flagos_hal_sim_stream_t*>(handle);
  bool has_tasks = rs->struct_size >= offsetof(flagos_hal_sim_stream_t, launch_host_task) +
                                          sizeof(rs->launch_host_task) &&
                   rs->launch_host_task;
  return has_tasks ? rs : nullptr;
}

}  // namespace

bool host_tasks_available(c10::DeviceIndex device) { return runtime_stream(device) != nullptr; }

void queue_host_task(c10::DeviceIndex device, std::string what, std::function<void()> task) {
  const flagos_hal_sim_stream_t* rs = runtime_stream(device);
  TORCH_CHECK(rs, "flagos: flagos:", int(device), "'s streams run no host work (", what, ")");
  auto* held = new HostTask{std::move(what), std::move(task)};
  flagos_status_t st = rs->launch_host_task(rs, &run_task, held, &release_task);  // owns `held`
  if (st != FLAGOS_SUCCESS) FLAGOS_HAL_RAISE(hal_of(device), st, "launch_host_task");
}

}  // namespace capture
}  // namespace flagos

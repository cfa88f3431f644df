// The profiler's PrivateUse1 event stubs (torch/csrc/profiler/stubs/base.h), on HAL timing
// events: torch's per-op device-time fallback (torch.autograd.profiler.profile(
// use_device="flagos", use_kineto=False), on every supported torch) records an event on the
// current flagos stream when each op starts and ends and reports their elapsed time as the
// op's device time, as it does with CUDA events for CUDA. Without them torch runs stubs
// that warn on every op and report garbage times.
#include <torch/csrc/profiler/stubs/base.h>

#include <c10/util/ApproximateClock.h>

#include "runtime/hal.h"
#include "runtime/hal_raise.h"
#include "runtime/stream.h"

namespace flagos {
namespace {

struct HalTimingEvent {
  c10::DeviceIndex device;
  flagos_event_t event;
};

void destroy_event(void* p) {
  auto* e = static_cast<HalTimingEvent*>(p);
  hal_of(e->device).event_destroy(e->event);
  delete e;
}

class EventStubs : public torch::profiler::impl::ProfilerStubs {
 public:
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    c10::DeviceIndex d = current_device();
    if (device) *device = d;
    const auto& hal = hal_of(d);
    flagos_event_t ev = nullptr;
    FLAGOS_HAL_CHECK(hal, hal.event_create(0, &ev));
    *event = torch::profiler::impl::ProfilerVoidEventStub(new HalTimingEvent{d, ev},
                                                          destroy_event);
    if (cpu_ns) *cpu_ns = c10::getTime();
    FLAGOS_HAL_CHECK(hal, hal.event_record(ev, hal_stream(current_stream(d))));
  }

  // Microseconds, as torch's CUDA stubs report them.
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* a,
                const torch::profiler::impl::ProfilerVoidEventStub* b) const override {
    auto* start = static_cast<const HalTimingEvent*>(a->get());
    auto* end = static_cast<const HalTimingEvent*>(b->get());
    const auto& hal = hal_of(end->device);
    FLAGOS_HAL_CHECK(hal, hal.event_synchronize(start->event));
    FLAGOS_HAL_CHECK(hal, hal.event_synchronize(end->event));
    float ms = 0;
    FLAGOS_HAL_CHECK(hal, hal.event_elapsed_time(&ms, start->event, end->event));
    return ms * 1000.0f;
  }

  // Ranges and marks are for a vendor's own tools (NVTX for CUDA); the HAL has none.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      CurrentDeviceScope on(d);
      op(d);
    }
  }

  void synchronize() const override {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      const auto& hal = hal_of(d);
      FLAGOS_HAL_CHECK(hal, hal.device_synchronize(hal_device(d).local_index));
    }
  }
};

struct RegisterEventStubs {
  RegisterEventStubs() {
    static EventStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
};
RegisterEventStubs register_event_stubs;

}  // namespace
}  // namespace flagos

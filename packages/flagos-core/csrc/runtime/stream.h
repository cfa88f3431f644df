// flagos streams: c10::Stream ids mapped onto HAL streams.
// Id 0 is the device's default HAL stream; id k > 0 is the k-th HAL stream created
// on that device. Streams come from a small per-priority pool per device (as CUDA's
// do), so code that asks for many streams does not create a HAL stream each time.
#pragma once

#include <c10/core/Stream.h>

#include "runtime/hal.h"

namespace flagos {

flagos_stream_t hal_stream(const c10::Stream& stream);
c10::Stream current_stream(c10::DeviceIndex device);
c10::Stream default_stream(c10::DeviceIndex device);
// Sets the current stream of the stream's device for this thread; returns the previous one.
c10::Stream exchange_stream(const c10::Stream& stream);
// A pooled stream; priority follows CUDA (lower is higher priority), clamped to the HAL's range.
c10::Stream pool_stream(c10::DeviceIndex device, int priority);
int stream_priority(const c10::Stream& stream);
void synchronize_stream(const c10::Stream& stream);
// Waits for every stream of flagos:`device`. While one of them captures a graph it raises
// instead, and the capture goes on (the HAL would refuse and invalidate it).
void synchronize_device(c10::DeviceIndex device);
bool query_stream(const c10::Stream& stream);
c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id);

// Events handed to PyTorch as void*: the HAL event and the device it belongs to.
struct Event {
  flagos_event_t handle = nullptr;
  c10::DeviceIndex device = -1;
};

}  // namespace flagos

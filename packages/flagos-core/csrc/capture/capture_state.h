// Which flagos streams are capturing now (csrc/capture/stream_graph.h begins and ends
// captures), for the op path's checks: work that cannot be recorded on a stream (the
// host reading device memory, a provider that is not capture-safe) raises while the
// current stream captures, instead of leaving a graph that replays the wrong thing.
#pragma once

#include <c10/core/Stream.h>

#include <c10/core/Allocator.h>

#include <atomic>
#include <string>
#include <vector>

namespace flagos {
namespace capture {

namespace detail {
extern std::atomic<int> g_underway;
bool is_capturing_slow(const c10::Stream& stream);
bool current_stream_capturing_slow(c10::DeviceIndex device);
bool device_capturing_slow(c10::DeviceIndex device);
}  // namespace detail

void begin(const c10::Stream& stream);
void end(const c10::Stream& stream);

// Whether `stream` captures now: one relaxed load while no stream captures.
inline bool is_capturing(const c10::Stream& stream) {
  return detail::g_underway.load(std::memory_order_relaxed) > 0 &&
         detail::is_capturing_slow(stream);
}
// Whether the current stream of flagos:`device` captures now: on every routed op, so one
// relaxed load inline while no stream captures.
inline bool current_stream_capturing(c10::DeviceIndex device) {
  return detail::g_underway.load(std::memory_order_relaxed) > 0 &&
         detail::current_stream_capturing_slow(device);
}

// Whether any stream of flagos:`device` captures now (what a device-wide wait would meet).
inline bool device_capturing(c10::DeviceIndex device) {
  return detail::g_underway.load(std::memory_order_relaxed) > 0 &&
         detail::device_capturing_slow(device);
}

// Keeps `t` alive as long as the graph the capture on `stream` becomes (host memory a
// recorded copy reads at every replay); take_kept hands them to the graph at its end.
void keep_alive(const c10::Stream& stream, c10::DataPtr&& memory);
std::vector<c10::DataPtr> take_kept(const c10::Stream& stream);

// Raises: `what` (an op and its provider, a host access) cannot be captured on the
// current stream of flagos:`device`.
[[noreturn]] void refuse(const std::string& what, c10::DeviceIndex device);

}  // namespace capture
}  // namespace flagos

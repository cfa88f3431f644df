// Device activity for profilers: while a profiler session records (profiler/), each routed
// op, each HAL copy and each memset is bracketed by a pair of HAL timing events on the
// stream it runs on; when the session stops, the pairs become device-timeline spans in
// host nanoseconds (the clock torch's profiler uses), each with the profiler's correlation
// id of the op that issued it. Off, the cost is one relaxed atomic load per call.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace flagos {
namespace device_activity {

enum class Kind : uint8_t { Op, Memcpy, Memset };

// A finished span on a device's timeline.
struct Span {
  Kind kind;
  std::string name;      // "aten::mm", "Memcpy HtoD", "Memset"
  std::string provider;  // the provider that served an op ("" for copies and memsets)
  c10::DeviceIndex device;
  int64_t stream;        // the flagos stream id
  int64_t start_ns, end_ns;  // system_clock nanoseconds
  uint64_t correlation;  // the profiler's id of the op that issued it (0: none)
  uint64_t bytes;        // copies and memsets
};

namespace detail {
extern std::atomic<bool> g_recording;
}

inline bool recording() { return detail::g_recording.load(std::memory_order_relaxed); }

// Starts recording on every flagos device (anchors each device's clock to the host's);
// false when no device is usable.
bool start();
// Stops recording and returns the spans recorded since start(), in issue order. Waits for
// the devices to finish what was recorded.
std::vector<Span> stop();

// The profiler's correlation ids of the ops running on this thread (innermost last).
void push_correlation(uint64_t id);
void pop_correlation();

// Brackets one call on `device`'s current stream while recording; does nothing otherwise.
// A HAL error while timing drops the span: profiling never fails the call it watches.
class Scope {
 public:
  Scope(Kind kind, const std::string& name, const char* provider, c10::DeviceIndex device,
        uint64_t bytes = 0) {
    if (C10_UNLIKELY(recording())) begin(kind, name, provider, device, bytes);
  }
  // A routed op, as `provider()` (the provider's name) runs it: the op's name and the
  // provider's are looked up only while recording.
  template <class ProviderName>
  Scope(const c10::OperatorHandle& op, ProviderName provider, c10::DeviceIndex device) {
    if (C10_UNLIKELY(recording()))
      begin(Kind::Op, c10::toString(op.operator_name()), provider(), device, 0);
  }
  ~Scope() {
    if (C10_UNLIKELY(slot_ >= 0)) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  // The call did not happen after all (a provider declined it): no span.
  void discard() {
    if (C10_UNLIKELY(slot_ >= 0)) drop();
  }

 private:
  void begin(Kind kind, const std::string& name, const char* provider, c10::DeviceIndex device,
             uint64_t bytes);
  void end();
  void drop();
  int64_t slot_ = -1;
  uint64_t session_ = 0;  // the recording session the slot belongs to
};

}  // namespace device_activity
}  // namespace flagos

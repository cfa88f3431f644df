#include "runtime/device_activity.h"

#include <chrono>
#include <mutex>
#include <optional>

#include "runtime/hal.h"
#include "runtime/stream.h"

namespace flagos {
namespace device_activity {

namespace detail {
std::atomic<bool> g_recording{false};
}

namespace {

struct Pending {
  Kind kind;
  std::string name;
  std::string provider;
  c10::DeviceIndex device;
  int64_t stream;
  flagos_event_t start = nullptr, end = nullptr;
  uint64_t correlation;
  uint64_t bytes;
};

// Each device's clock anchor: an event that completed at host time `host_ns`.
struct Anchor {
  flagos_event_t event = nullptr;
  int64_t host_ns = 0;
};

std::mutex g_mutex;
uint64_t g_session = 0;  // counts start() calls: a scope open across stop() is dropped
std::vector<Pending>* g_pending = new std::vector<Pending>();  // outlives static teardown
std::vector<Anchor>* g_anchors = new std::vector<Anchor>();
thread_local std::vector<uint64_t> t_correlation;

int64_t host_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void destroy(c10::DeviceIndex device, flagos_event_t ev) {
  if (ev) hal_of(device).event_destroy(ev);
}

std::optional<Anchor> anchor(c10::DeviceIndex device) {
  const auto& hal = hal_of(device);
  CurrentDeviceScope on(device);
  flagos_event_t ev = nullptr;
  if (hal.device_synchronize(hal_device(device).local_index) != FLAGOS_SUCCESS || hal.event_create(0, &ev) != FLAGOS_SUCCESS)
    return std::nullopt;
  if (hal.event_record(ev, hal_stream(default_stream(device))) != FLAGOS_SUCCESS ||
      hal.event_synchronize(ev) != FLAGOS_SUCCESS) {
    hal.event_destroy(ev);
    return std::nullopt;
  }
  return Anchor{ev, host_ns()};
}

}  // namespace

bool start() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (detail::g_recording.load()) return true;
  ++g_session;
  g_anchors->assign(device_count(), Anchor{});
  bool any = false;
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    try {
      if (auto a = anchor(d)) {
        (*g_anchors)[d] = *a;
        any = true;
      }
    } catch (const std::exception&) {  // a lost device records nothing
    }
  }
  detail::g_recording.store(any);
  return any;
}

std::vector<Span> stop() {
  std::lock_guard<std::mutex> lock(g_mutex);
  detail::g_recording.store(false);
  std::vector<Span> spans;
  std::vector<bool> synced(g_anchors->size(), false);
  for (auto& p : *g_pending) {
    if (p.device < 0 || p.device >= static_cast<c10::DeviceIndex>(g_anchors->size())) continue;
    const auto& a = (*g_anchors)[p.device];
    const auto& hal = hal_of(p.device);
    if (!synced[p.device]) {
      CurrentDeviceScope on(p.device);
      hal.device_synchronize(hal_device(p.device).local_index);
      synced[p.device] = true;
    }
    float to_start = 0, to_end = 0;
    if (a.event && p.start && p.end &&
        hal.event_elapsed_time(&to_start, a.event, p.start) == FLAGOS_SUCCESS &&
        hal.event_elapsed_time(&to_end, a.event, p.end) == FLAGOS_SUCCESS) {
      int64_t s = a.host_ns + static_cast<int64_t>(to_start * 1e6);
      int64_t e = a.host_ns + static_cast<int64_t>(to_end * 1e6);
      spans.push_back(Span{p.kind, std::move(p.name), std::move(p.provider), p.device, p.stream,
                           s, std::max(s, e), p.correlation, p.bytes});
    }
    destroy(p.device, p.start);
    destroy(p.device, p.end);
  }
  g_pending->clear();
  for (c10::DeviceIndex d = 0; d < static_cast<c10::DeviceIndex>(g_anchors->size()); ++d)
    destroy(d, (*g_anchors)[d].event);
  g_anchors->clear();
  return spans;
}

void push_correlation(uint64_t id) { t_correlation.push_back(id); }

void pop_correlation() {
  if (!t_correlation.empty()) t_correlation.pop_back();
}

void Scope::begin(Kind kind, const std::string& name, const char* provider,
                  c10::DeviceIndex device, uint64_t bytes) {
  const auto& hal = hal_of(device);
  c10::Stream stream = current_stream(device);
  flagos_event_t ev = nullptr;
  if (hal.event_create(0, &ev) != FLAGOS_SUCCESS) return;
  if (hal.event_record(ev, hal_stream(stream)) != FLAGOS_SUCCESS) {
    hal.event_destroy(ev);
    return;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!detail::g_recording.load()) {  // stopped meanwhile
    hal.event_destroy(ev);
    return;
  }
  slot_ = static_cast<int64_t>(g_pending->size());
  session_ = g_session;
  g_pending->push_back(Pending{kind, name, provider ? provider : "", device, stream.id(), ev,
                               nullptr, t_correlation.empty() ? 0 : t_correlation.back(),
                               bytes});
}

void Scope::drop() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (session_ == g_session && slot_ < static_cast<int64_t>(g_pending->size()))
    (*g_pending)[slot_].end = nullptr;  // stop() skips a span without an end
  slot_ = -1;
}

void Scope::end() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (session_ != g_session || !detail::g_recording.load() ||
      slot_ >= static_cast<int64_t>(g_pending->size()))
    return;  // stop() took it already
  auto& p = (*g_pending)[slot_];
  const auto& hal = hal_of(p.device);
  flagos_event_t ev = nullptr;
  if (hal.event_create(0, &ev) != FLAGOS_SUCCESS) return;
  if (hal.event_record(ev, hal_stream(current_stream(p.device))) != FLAGOS_SUCCESS) {
    hal.event_destroy(ev);
    return;
  }
  p.end = ev;
}

}  // namespace device_activity
}  // namespace flagos

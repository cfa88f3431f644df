#include "capture/capture_state.h"
#include "runtime/hal_raise.h"
#include "runtime/stream.h"

#include <array>
#include <atomic>
#include <mutex>

namespace flagos {
namespace {

constexpr int kPoolPerPriority = 4;
constexpr int kLevels = 8;
constexpr size_t kMaxStreams = 1 + kPoolPerPriority * kLevels;

// Handles are published once and never change, so the per-op lookup (hal_stream) reads
// them without a lock; creation takes the mutex.
struct DeviceStreams {
  std::mutex mutex;
  std::array<std::atomic<flagos_stream_t>, kMaxStreams> handles{};  // [0]: default stream
  size_t count = 1;                                                 // ids in use, incl. 0
  std::array<int, kMaxStreams> priorities{};
  // pool[level] holds ids; level 0 = lowest priority.
  std::array<std::vector<c10::StreamId>, kLevels> pool;
  std::array<size_t, kLevels> next{};
};

std::array<DeviceStreams, 64>& all_streams() {
  static std::array<DeviceStreams, 64> streams;
  return streams;
}

thread_local std::array<c10::StreamId, 64> t_current{};  // zero-initialised: default streams

DeviceStreams& streams_of(c10::DeviceIndex device) {
  hal_device(device);  // range check
  return all_streams()[device];
}

}  // namespace

c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}

flagos_stream_t hal_stream(const c10::Stream& stream) {
  auto device = stream.device_index();
  auto& ds = streams_of(device);
  auto id = stream.id();
  TORCH_CHECK(id >= 0 && static_cast<size_t>(id) < kMaxStreams, "flagos: unknown stream id ",
              id, " on flagos:", int(device));
  flagos_stream_t handle = ds.handles[id].load(std::memory_order_acquire);
  if (handle) return handle;
  TORCH_CHECK(id == 0, "flagos: unknown stream id ", id, " on flagos:", int(device));
  std::lock_guard<std::mutex> lock(ds.mutex);
  handle = ds.handles[0].load(std::memory_order_relaxed);
  if (!handle) {
    const auto& d = hal_device(device);
    FLAGOS_HAL_CHECK(*d.lib->table, d.lib->table->stream_get_default(d.local_index, &handle));
    ds.handles[0].store(handle, std::memory_order_release);
  }
  return handle;
}

c10::Stream current_stream(c10::DeviceIndex device) {
  hal_device(device);
  return make_stream(device, t_current[device]);
}

c10::Stream default_stream(c10::DeviceIndex device) {
  hal_device(device);
  return make_stream(device, 0);
}

c10::Stream exchange_stream(const c10::Stream& stream) {
  auto device = stream.device_index();
  hal_stream(stream);  // validates the id
  auto prev = make_stream(device, t_current[device]);
  t_current[device] = stream.id();
  return prev;
}

c10::Stream pool_stream(c10::DeviceIndex device, int priority) {
  const auto& d = hal_device(device);
  const auto& hal = *d.lib->table;
  int least = 0, greatest = 0;
  FLAGOS_HAL_CHECK(hal, hal.stream_get_priority_range(&least, &greatest));
  int clamped = std::min(std::max(priority, greatest), least);
  size_t level = std::min<size_t>(static_cast<size_t>(least - clamped), 7);
  auto& ds = streams_of(device);
  std::lock_guard<std::mutex> lock(ds.mutex);
  auto& pool = ds.pool[level];
  if (pool.size() < kPoolPerPriority) {
    flagos_stream_t handle = nullptr;
    FLAGOS_HAL_CHECK(hal, hal.stream_create(d.local_index, clamped, &handle));
    size_t id = ds.count++;
    ds.priorities[id] = clamped;
    ds.handles[id].store(handle, std::memory_order_release);
    pool.push_back(static_cast<c10::StreamId>(id));
    return make_stream(device, pool.back());
  }
  auto id = pool[ds.next[level]++ % pool.size()];
  return make_stream(device, id);
}

int stream_priority(const c10::Stream& stream) {
  if (stream.id() == 0) return 0;
  auto& ds = streams_of(stream.device_index());
  std::lock_guard<std::mutex> lock(ds.mutex);
  TORCH_CHECK(stream.id() > 0 && static_cast<size_t>(stream.id()) < ds.count,
              "flagos: unknown stream id ", stream.id());
  return ds.priorities[stream.id()];
}

void synchronize_stream(const c10::Stream& stream) {
  if (C10_UNLIKELY(capture::is_capturing(stream))) {
    // Refused before the HAL, which would also invalidate the capture.
    capture::refuse("waiting for the capturing stream (.item(), a host copy, synchronize)",
                    stream.device_index());
  }
  const auto& hal = hal_of(stream.device_index());
  FLAGOS_HAL_CHECK(hal, hal.stream_synchronize(hal_stream(stream)));
}

void synchronize_device(c10::DeviceIndex device) {
  if (C10_UNLIKELY(capture::device_capturing(device))) {
    capture::refuse("waiting for every stream of flagos:" + std::to_string(device) +
                        " (torch.flagos.synchronize(), the device's synchronize) while one "
                        "of them captures a graph,",
                    device);
  }
  const auto& d = hal_device(device);
  FLAGOS_HAL_CHECK(*d.lib->table, d.lib->table->device_synchronize(d.local_index));
}

bool query_stream(const c10::Stream& stream) {
  const auto& hal = hal_of(stream.device_index());
  flagos_status_t st = hal.stream_query(hal_stream(stream));
  if (st == FLAGOS_ERROR_NOT_READY) return false;
  if (st != FLAGOS_SUCCESS) FLAGOS_HAL_RAISE(hal, st, "stream_query");
  return true;
}

}  // namespace flagos

// The simulated device: streams and events. Every stream (each device's default stream
// included) is a worker thread running its queue in order, so async work really is
// asynchronous. An event record queues a marker; when the worker reaches it, the
// capture completes with a steady-clock timestamp.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "flagos_hal/sim_runtime.h"
#include "sim.hpp"

struct flagos_stream_s {};  // handles are the addresses of Stream / Event objects
struct flagos_event_s {};

namespace flagos_sim {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -2;

// The work an event captured at one record.
struct Capture {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Clock::time_point when;

  void complete() {
    std::lock_guard<std::mutex> lock(mu);
    when = Clock::now();
    done = true;
    cv.notify_all();
  }
  bool is_done() {
    std::lock_guard<std::mutex> lock(mu);
    return done;
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};

struct Stream : flagos_stream_s {
  int device;
  int priority;
  bool is_default;
  std::mutex mu;
  std::condition_variable has_work, idle;
  std::deque<Task> queue;
  // Queued or running. Changed under `mu`; read without it where the answer alone is
  // enough (an idle stream's synchronize is on every host access of the memory).
  std::atomic<size_t> pending{0};
  bool stopping = false;
  std::thread worker;
  // The native handle: what kernel libraries for this device launch on (sim_runtime.h).
  flagos_hal_sim_stream_t runtime{};

  Stream(int d, int p, bool def) : device(d), priority(p), is_default(def) {
    runtime.struct_size = sizeof(runtime);
    runtime.stream = this;
    runtime.launch_host_func = &launch_host_func;
    // VENDOR: create the runtime's stream here; the worker thread goes away.
    worker = std::thread([this] { run(); });
  }
  void run() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu);
        has_work.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();
      std::lock_guard<std::mutex> lock(mu);
      if (pending.fetch_sub(1, std::memory_order_release) == 1) idle.notify_all();
    }
  }
  void push(Task task) {
    std::lock_guard<std::mutex> lock(mu);
    queue.push_back(std::move(task));
    ++pending;
    has_work.notify_one();
  }
  static flagos_status_t launch_host_func(const flagos_hal_sim_stream_t* self, void (*fn)(void*),
                                          void* data) {
    if (!self || !fn) return fail(FLAGOS_ERROR_INVALID_VALUE, "launch_host_func: NULL argument");
    return submit(self->stream, [fn, data] { fn(data); });
  }
  bool is_idle() { return pending.load(std::memory_order_acquire) == 0; }
  void synchronize() {
    if (is_idle()) return;
    std::unique_lock<std::mutex> lock(mu);
    idle.wait(lock, [&] { return pending.load(std::memory_order_acquire) == 0; });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
      has_work.notify_one();
    }
    worker.join();
  }
};

struct Event : flagos_event_s {
  unsigned flags;
  std::mutex mu;
  std::shared_ptr<Capture> last;  // nullptr: never recorded (counts as complete)

  explicit Event(unsigned f) : flags(f) {}
  std::shared_ptr<Capture> capture() {
    std::lock_guard<std::mutex> lock(mu);
    return last;
  }
};

// Live handles. Leaked on purpose, with the default streams' threads: they are still
// waiting for work when the process exits, and nothing may destroy them under their feet.
struct Registry {
  std::mutex mu;
  std::unordered_map<const void*, std::shared_ptr<Stream>> streams;
  std::unordered_map<const void*, std::shared_ptr<Event>> events;
  std::unordered_map<int, std::shared_ptr<Stream>> defaults;
  std::atomic<uint64_t> destroyed{0};  // streams destroyed so far (see live_stream)
};
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

std::shared_ptr<Stream> find_stream(flagos_stream_t s) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().streams.find(s);
  return it == registry().streams.end() ? nullptr : it->second;
}

std::shared_ptr<Event> find_event(flagos_event_t e) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().events.find(e);
  return it == registry().events.end() ? nullptr : it->second;
}

flagos_status_t bad_stream(const char* fn) {
  return fail(FLAGOS_ERROR_INVALID_HANDLE, std::string(fn) + ": unknown or destroyed stream");
}
// The stream behind a handle, for the calls made around every op (query, synchronize,
// async work): the last handle a thread used is answered from a per-thread cache, without
// the registry's lock, until any stream is destroyed. VENDOR: keep handle validation off
// the lock on the hot path, as here; a mutex per call is a measurable share of a small op.
Stream* live_stream(flagos_stream_t handle) {
  thread_local struct {
    flagos_stream_t handle = nullptr;
    uint64_t destroyed = 0;
    std::shared_ptr<Stream> stream;  // keeps a destroyed stream's object, not its use
  } cache;
  uint64_t destroyed = registry().destroyed.load(std::memory_order_acquire);
  if (cache.stream && cache.handle == handle && cache.destroyed == destroyed) {
    return cache.stream.get();
  }
  cache.stream = find_stream(handle);
  cache.handle = handle;
  cache.destroyed = destroyed;
  return cache.stream.get();
}

flagos_status_t bad_event(const char* fn) {
  return fail(FLAGOS_ERROR_INVALID_HANDLE, std::string(fn) + ": unknown or destroyed event");
}

std::shared_ptr<Stream> default_stream(int device) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto& slot = registry().defaults[device];
  if (!slot) {
    slot = std::make_shared<Stream>(device, kLeastPriority, true);
    registry().streams[slot.get()] = slot;
  }
  return slot;
}

}  // namespace

flagos_status_t submit(flagos_stream_t stream, Task task) {
  Stream* s = live_stream(stream);
  if (!s) return bad_stream("async call");
  s->push(std::move(task));
  return FLAGOS_SUCCESS;
}

void sync_default_stream(int device) {
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().defaults.find(device);
    if (it != registry().defaults.end()) s = it->second;
  }
  if (s) s->synchronize();
}

flagos_status_t device_synchronize(int device) {
  if (flagos_status_t st = check_device(device, "device_synchronize")) return st;
  std::vector<std::shared_ptr<Stream>> mine;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    for (auto& kv : registry().streams) {
      if (kv.second->device == device) mine.push_back(kv.second);
    }
  }
  for (auto& s : mine) s->synchronize();
  return FLAGOS_SUCCESS;
}

flagos_status_t stream_create(int device, int priority, flagos_stream_t* stream) {
  if (flagos_status_t st = check_device(device, "stream_create")) return st;
  if (!stream) return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_create: stream is NULL");
  if (priority > kLeastPriority) priority = kLeastPriority;
  if (priority < kGreatestPriority) priority = kGreatestPriority;
  auto s = std::make_shared<Stream>(device, priority, false);
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().streams[s.get()] = s;
  *stream = s.get();
  return FLAGOS_SUCCESS;
}

flagos_status_t stream_get_priority_range(int* least, int* greatest) {
  if (!least || !greatest) return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_get_priority_range: NULL output");
  *least = kLeastPriority;
  *greatest = kGreatestPriority;
  return FLAGOS_SUCCESS;
}

flagos_status_t stream_get_default(int device, flagos_stream_t* stream) {
  if (flagos_status_t st = check_device(device, "stream_get_default")) return st;
  if (!stream) return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_get_default: stream is NULL");
  *stream = default_stream(device).get();
  return FLAGOS_SUCCESS;
}

flagos_status_t stream_destroy(flagos_stream_t stream) {
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().streams.find(stream);
    if (it == registry().streams.end()) return bad_stream("stream_destroy");
    if (it->second->is_default) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_destroy: the default stream cannot be destroyed");
    }
    s = std::move(it->second);
    registry().streams.erase(it);
    registry().destroyed.fetch_add(1, std::memory_order_acq_rel);
  }
  s->stop();  // the worker drains the queue first
  return FLAGOS_SUCCESS;
}

flagos_status_t stream_query(flagos_stream_t stream) {
  Stream* s = live_stream(stream);
  if (!s) return bad_stream("stream_query");
  return s->is_idle() ? FLAGOS_SUCCESS : FLAGOS_ERROR_NOT_READY;
}

flagos_status_t stream_synchronize(flagos_stream_t stream) {
  Stream* s = live_stream(stream);
  if (!s) return bad_stream("stream_synchronize");
  s->synchronize();
  return FLAGOS_SUCCESS;
}

flagos_status_t stream_wait_event(flagos_stream_t stream, flagos_event_t event) {
  auto s = find_stream(stream);
  if (!s) return bad_stream("stream_wait_event");
  auto e = find_event(event);
  if (!e) return bad_event("stream_wait_event");
  auto cap = e->capture();
  if (cap && !cap->is_done()) s->push([cap] { cap->wait(); });
  return FLAGOS_SUCCESS;
}

flagos_status_t stream_get_device(flagos_stream_t stream, int* device) {
  if (!device) return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_get_device: device is NULL");
  auto s = find_stream(stream);
  if (!s) return bad_stream("stream_get_device");
  *device = s->device;
  return FLAGOS_SUCCESS;
}

flagos_status_t stream_get_native_handle(flagos_stream_t stream, void** handle) {
  if (!handle) return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_get_native_handle: handle is NULL");
  Stream* s = live_stream(stream);  // on the path of every native-provider call: no lock
  if (!s) return bad_stream("stream_get_native_handle");
  // VENDOR: the runtime's stream handle (what your kernel libraries take as their stream).
  *handle = &s->runtime;
  return FLAGOS_SUCCESS;
}

flagos_status_t event_create(unsigned int flags, flagos_event_t* event) {
  if (!event) return fail(FLAGOS_ERROR_INVALID_VALUE, "event_create: event is NULL");
  if (flags & ~(FLAGOS_EVENT_DISABLE_TIMING | FLAGOS_EVENT_BLOCKING_SYNC)) {
    return fail(FLAGOS_ERROR_INVALID_VALUE, "event_create: unknown flags " + std::to_string(flags));
  }
  auto e = std::make_shared<Event>(flags);
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().events[e.get()] = e;
  *event = e.get();
  return FLAGOS_SUCCESS;
}

flagos_status_t event_destroy(flagos_event_t event) {
  std::lock_guard<std::mutex> lock(registry().mu);
  // Pending captures stay alive in the streams' queues; only the handle goes.
  if (!registry().events.erase(event)) return bad_event("event_destroy");
  return FLAGOS_SUCCESS;
}

flagos_status_t event_record(flagos_event_t event, flagos_stream_t stream) {
  auto e = find_event(event);
  if (!e) return bad_event("event_record");
  auto s = find_stream(stream);
  if (!s) return bad_stream("event_record");
  auto cap = std::make_shared<Capture>();
  {
    std::lock_guard<std::mutex> lock(e->mu);
    e->last = cap;
  }
  s->push([cap] { cap->complete(); });
  return FLAGOS_SUCCESS;
}

flagos_status_t event_query(flagos_event_t event) {
  auto e = find_event(event);
  if (!e) return bad_event("event_query");
  auto cap = e->capture();
  return !cap || cap->is_done() ? FLAGOS_SUCCESS : FLAGOS_ERROR_NOT_READY;
}

flagos_status_t event_synchronize(flagos_event_t event) {
  auto e = find_event(event);
  if (!e) return bad_event("event_synchronize");
  if (auto cap = e->capture()) cap->wait();
  return FLAGOS_SUCCESS;
}

flagos_status_t event_elapsed_time(float* ms, flagos_event_t start, flagos_event_t end) {
  if (!ms) return fail(FLAGOS_ERROR_INVALID_VALUE, "event_elapsed_time: ms is NULL");
  auto a = find_event(start), b = find_event(end);
  if (!a || !b) return bad_event("event_elapsed_time");
  if ((a->flags | b->flags) & FLAGOS_EVENT_DISABLE_TIMING) {
    return fail(FLAGOS_ERROR_INVALID_HANDLE, "event_elapsed_time: an event was created with timing disabled");
  }
  auto ca = a->capture(), cb = b->capture();
  if (!ca || !cb) return fail(FLAGOS_ERROR_INVALID_VALUE, "event_elapsed_time: an event was never recorded");
  if (!ca->is_done() || !cb->is_done()) {
    return fail(FLAGOS_ERROR_NOT_READY, "event_elapsed_time: an event has not completed");
  }
  std::lock_guard<std::mutex> la(ca->mu);
  std::unique_lock<std::mutex> lb(cb->mu, std::defer_lock);
  if (cb != ca) lb.lock();
  *ms = std::chrono::duration<float, std::milli>(cb->when - ca->when).count();
  return FLAGOS_SUCCESS;
}

}  // namespace flagos_sim

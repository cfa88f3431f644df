// The simulated device: streams and events. Every stream (each device's default stream
// included) is a worker thread running its queue in order, so async work really is
// asynchronous. An event record queues a marker; when the worker reaches it, the
// capture completes with a steady-clock timestamp.
#include "sim.hpp"

namespace flagos_sim {

constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -2;

void Capture::complete() {
  std::lock_guard<std::mutex> lock(mu);
  when = Clock::now();
  done = true;
  cv.notify_all();
}

bool Capture::is_done() {
  std::lock_guard<std::mutex> lock(mu);
  return done;
}

void Capture::wait() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
}

namespace {
thread_local const SimStream* t_worker_of = nullptr;

// Work running on a stream (a host function) that waits for that same stream would wait
// for itself forever: refused, as a real runtime refuses runtime calls from its stream
// callbacks.
Status waits_for_itself(const char* fn) {
  return kit::fail(FLAGOS_ERROR_INVALID_VALUE,
                   "%s: called from work running on the stream it would wait for (a host "
                   "function); it would wait for itself. Wait from another thread", fn);
}
// The sim captures one stream's copies, memsets, kernel launches and graph executions;
// events would join other streams' work into a capture, which it does not record.
Status events_in_capture(const char* fn) {
  return kit::fail(FLAGOS_ERROR_NOT_SUPPORTED,
                   "%s: the stream is capturing, and sim captures no events (one stream's "
                   "copies, memsets and kernel launches)", fn);
}
}  // namespace

const SimStream* SimStream::current() { return t_worker_of; }

void SimStream::run() {
  t_worker_of = this;
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
    task = nullptr;  // what it holds is released before the stream counts it done
    std::lock_guard<std::mutex> lock(mu);
    if (pending.fetch_sub(1, std::memory_order_release) == 1) idle.notify_all();
  }
}

void SimStream::push(Task task) {
  std::lock_guard<std::mutex> lock(mu);
  if (capturing()) {  // recorded, not run (capture.cpp)
    recording.push_back(std::move(task));
    return;
  }
  queue.push_back(std::move(task));
  ++pending;
  has_work.notify_one();
}

void SimStream::synchronize() {
  if (is_idle()) return;
  std::unique_lock<std::mutex> lock(mu);
  idle.wait(lock, [&] { return pending.load(std::memory_order_acquire) == 0; });
}

// A std::thread destroyed while joinable calls std::terminate ("terminate called without
// an active exception"). stream_destroy stops the worker; this covers an object dropped
// without it. The worker itself never gets here: stream_destroy refuses to run on it.
SimStream::~SimStream() {
  if (worker.joinable() && !on_worker()) stop();
}

void SimStream::stop() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
    has_work.notify_one();
  }
  worker.join();
}

std::shared_ptr<Capture> SimEvent::capture() {
  std::lock_guard<std::mutex> lock(mu);
  return last;
}

// sim_runtime.h: fn(data) runs on the stream's worker, in order with its other work.
static Status launch_host_func(const flagos_hal_sim_stream_t* self, void (*fn)(void*), void* data) {
  if (!self || !fn) return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "launch_host_func: NULL argument");
  SimStream* s = kit::Hal<Sim>::stream(self->stream);
  if (!s) return kit::fail(FLAGOS_ERROR_INVALID_HANDLE, "launch_host_func: unknown or destroyed stream");
  if (s->capturing()) {
    // A replay would call fn(data) again, after the first run may have released `data`.
    return kit::fail(FLAGOS_ERROR_NOT_SUPPORTED,
                     "launch_host_func: host functions cannot be captured on sim (their data "
                     "may not outlive one run)");
  }
  s->push([fn, data] { fn(data); });
  return FLAGOS_SUCCESS;
}

// flagos_hal.h stream_launch_host_task: fn(data) runs on the stream's worker, now or at each
// replay of a capture; release(data) runs when the last copy of the task (queued,
// recorded, replays) is gone.
Status Sim::stream_launch_host_task(Stream& s, void (*fn)(void*), void* data,
                                    void (*release)(void*)) {
  struct Held {
    void* data;
    void (*release)(void*);
    ~Held() {
      if (release) release(data);
    }
  };
  std::shared_ptr<Held> held(new Held{data, release});
  s.push([fn, held] { fn(held->data); });
  return FLAGOS_SUCCESS;
}

// sim_runtime.h: the same, for the sim's kernel libraries, through the native handle.
static Status launch_host_task(const flagos_hal_sim_stream_t* self, void (*fn)(void*), void* data,
                               void (*release)(void*)) {
  if (!self) {
    if (release) release(data);
    return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "launch_host_task: NULL argument");
  }
  return kit::Hal<Sim>::table()->stream_launch_host_task(self->stream, fn, data, release);
}

// ---- streams -------------------------------------------------------------------------
Status Sim::priority_range(int* least, int* greatest) {
  *least = kLeastPriority;
  *greatest = kGreatestPriority;
  return FLAGOS_SUCCESS;
}

Status Sim::stream_create(Stream& s) {
  // Default streams (s.is_default) are never destroyed: their worker still waits for work
  // when the process exits.
  s.runtime = {sizeof(flagos_hal_sim_stream_t), kit::Hal<Sim>::handle(s), &launch_host_func,
               test_control(), &launch_host_task};
  s.worker = std::thread([&s] { s.run(); });
  return FLAGOS_SUCCESS;
}

Status Sim::stream_destroy(Stream& s) {
  // From work running on the stream (a host function), the worker would have to join
  // itself: refused, as a real runtime refuses runtime calls from its stream callbacks.
  if (s.on_worker()) {
    return kit::fail(FLAGOS_ERROR_INVALID_VALUE,
                     "stream_destroy: called from work running on this stream (a host "
                     "function); destroy the stream from another thread once its work is done");
  }
  s.stop();  // the worker drains the queue first
  return FLAGOS_SUCCESS;
}

Status Sim::stream_query(Stream& s) { return s.is_idle() ? FLAGOS_SUCCESS : FLAGOS_ERROR_NOT_READY; }

Status Sim::stream_synchronize(Stream& s) {
  if (!s.is_idle() && s.on_worker()) return waits_for_itself("stream_synchronize");
  s.synchronize();
  return FLAGOS_SUCCESS;
}

Status Sim::stream_wait_event(Stream& s, Event& e) {
  if (s.capturing()) return events_in_capture("stream_wait_event");
  auto cap = e.capture();
  if (!cap->is_done()) s.push([cap] { cap->wait(); });
  return FLAGOS_SUCCESS;
}

// The runtime stream kernel libraries for this device launch on (sim_runtime.h).
void* Sim::stream_native_handle(Stream& s) { return &s.runtime; }

// ---- events --------------------------------------------------------------------------
Status Sim::event_create(Event&) { return FLAGOS_SUCCESS; }

Status Sim::event_destroy(Event&) { return FLAGOS_SUCCESS; }  // captures live in the queues

Status Sim::event_record(Event& e, Stream& s) {
  if (s.capturing()) return events_in_capture("event_record");
  auto cap = std::make_shared<Capture>();
  cap->stream = &s;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    e.last = cap;
  }
  s.push([cap] { cap->complete(); });
  return FLAGOS_SUCCESS;
}

Status Sim::event_query(Event& e) { return e.capture()->is_done() ? FLAGOS_SUCCESS : FLAGOS_ERROR_NOT_READY; }

Status Sim::event_synchronize(Event& e) {
  auto cap = e.capture();
  if (cap->stream && cap->stream == SimStream::current() && !cap->is_done())
    return waits_for_itself("event_synchronize");
  cap->wait();
  return FLAGOS_SUCCESS;
}

Status Sim::event_elapsed_time(float* ms, Event& start, Event& end) {
  auto a = start.capture(), b = end.capture();
  if (!a->is_done() || !b->is_done()) {
    return kit::fail(FLAGOS_ERROR_NOT_READY, "event_elapsed_time: an event has not completed");
  }
  std::lock_guard<std::mutex> la(a->mu);
  std::unique_lock<std::mutex> lb(b->mu, std::defer_lock);
  if (b != a) lb.lock();
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return FLAGOS_SUCCESS;
}

}  // namespace flagos_sim

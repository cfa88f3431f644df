// The simulated device: stream capture. A capturing stream's push (stream.cpp) appends
// the task to the stream's recording instead of its queue; a replay queues a copy of them
// as one task, which runs them in the recorded order on the worker (a copy: a task keeps
// state between its steps, and two streams may run one replay at once).
#include "sim.hpp"

namespace flagos_sim {

// The recording is empty whenever the stream does not capture (end moves it out).
Status Sim::stream_begin_capture(Stream&) { return FLAGOS_SUCCESS; }

Status Sim::stream_end_capture(Stream& s, CapturedWork& work) {
  std::lock_guard<std::mutex> lock(s.mu);
  work.tasks = std::move(s.recording);
  s.recording.clear();
  return FLAGOS_SUCCESS;
}

Status Sim::capture_instantiate(CapturedWork& work, Replay& replay) {
  replay.tasks = work.tasks;
  return FLAGOS_SUCCESS;
}

// The tasks go now (what they hold is released: host tasks' data, tensors), even where a
// handle cache still holds the object itself.
Status Sim::capture_destroy(CapturedWork& work) {
  work.tasks.clear();
  return FLAGOS_SUCCESS;
}

Status Sim::replay_launch(Replay& replay, Stream& s) {
  s.push([tasks = replay.tasks]() mutable {
    for (Task& task : tasks) task();
  });
  return FLAGOS_SUCCESS;
}

Status Sim::replay_destroy(Replay& replay) {  // queued launches hold copies
  replay.tasks.clear();
  return FLAGOS_SUCCESS;
}

}  // namespace flagos_sim

// The @name@ HAL: streams and events. As generated, work runs when it is queued, so a
// stream is always idle and an event complete once recorded.
#include "@name@.hpp"

namespace flagos_@name@ {

Status @Name@::priority_range(int* least, int* greatest) {
  *least = 0;  // TODO(@name@): your runtime's stream priority range (lower = higher priority)
  *greatest = 0;
  return FLAGOS_SUCCESS;
}

Status @Name@::stream_create(Stream& stream) {
  // TODO(@name@): create a stream with stream.priority on stream.device; the default
  // stream (stream.is_default) is your runtime's default/NULL stream, if it has one
  (void)stream;
  return FLAGOS_SUCCESS;
}

Status @Name@::stream_destroy(Stream&) {
  return FLAGOS_SUCCESS;  // TODO(@name@): destroy the stream once its queued work is done
}

Status @Name@::stream_query(Stream&) {
  return FLAGOS_SUCCESS;  // TODO(@name@): SUCCESS when idle, FLAGOS_ERROR_NOT_READY otherwise
}

Status @Name@::stream_synchronize(Stream&) {
  return FLAGOS_SUCCESS;  // TODO(@name@): block until the stream is idle
}

Status @Name@::stream_wait_event(Stream&, Event&) {
  return FLAGOS_SUCCESS;  // TODO(@name@): later work on the stream waits for the event
}

void* @Name@::stream_native_handle(Stream&) {
  return nullptr;  // TODO(@name@): the native twin's stream handle, if torch has one
}

Status @Name@::event_create(Event&) {
  return FLAGOS_SUCCESS;  // TODO(@name@): create your runtime's event (event.flags)
}

Status @Name@::event_destroy(Event&) {
  return FLAGOS_SUCCESS;  // TODO(@name@): destroy it (pending records still complete)
}

Status @Name@::event_record(Event& event, Stream&) {
  event.when = std::chrono::steady_clock::now();  // TODO(@name@): record on the stream
  return FLAGOS_SUCCESS;
}

Status @Name@::event_query(Event&) {
  return FLAGOS_SUCCESS;  // TODO(@name@): SUCCESS when complete, FLAGOS_ERROR_NOT_READY otherwise
}

Status @Name@::event_synchronize(Event&) {
  return FLAGOS_SUCCESS;  // TODO(@name@): block until the record completed
}

Status @Name@::event_elapsed_time(float* ms, Event& start, Event& end) {
  // TODO(@name@): your runtime's elapsed time between two completed records
  *ms = std::chrono::duration<float, std::milli>(end.when - start.when).count();
  return FLAGOS_SUCCESS;
}

}  // namespace flagos_@name@

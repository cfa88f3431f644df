// flagos HAL kit: the optional stream capture (ABI 1.3, flagos_hal.h "stream capture").
//
// A vendor whose runtime can record a stream's work and replay it adds to its class (after
// its Stream type) the two types and FLAGOS_HAL_KIT_CAPTURE_CALLS(), which declares the
// calls below, and defines them:
//
//   struct CapturedWork : kit::CapturedWorkBase { ... };  // what a capture recorded
//   struct Replay : kit::ReplayBase { ... };              // a capture made launchable
//   // Start recording on `s` (a created stream of s.device, not capturing: checked).
//   static Status stream_begin_capture(Stream& s);
//   // Stop recording on `s` and move what was recorded into `work`; called for every
//   // begun capture, also one the kit then reports as invalidated (`work` is dropped).
//   static Status stream_end_capture(Stream& s, CapturedWork& work);
//   static Status capture_instantiate(CapturedWork& work, Replay& replay);
//   static Status capture_destroy(CapturedWork& work);
//   // Queue the replay on `s` (of replay.device: checked).
//   static Status replay_launch(Replay& replay, Stream& s);
//   static Status replay_destroy(Replay& replay);  // after its queued launches finish
//
// The kit keeps whether each stream captures, answers stream_is_capturing, and makes the
// ABI's refusals for the calls it owns: stream_query, stream_synchronize and
// device_synchronize on a capturing stream (or device) fail with INVALID_VALUE and
// invalidate the capture, stream_destroy of a capturing stream fails. The vendor refuses
// what its recording cannot take (its own calls on a capturing stream, see
// StreamBase::capturing()). A vendor class without `Replay` leaves the entries NULL.
#pragma once

#include <memory>
#include <type_traits>

#include "flagos_hal/flagos_hal.h"
#include "flagos_hal/kit/errors.hpp"
#include "flagos_hal/kit/faults.hpp"
#include "flagos_hal/kit/registry.hpp"

// The stream capture's calls, declared inside a vendor class (after its Stream,
// CapturedWork and Replay types); see above for what each does.
#define FLAGOS_HAL_KIT_CAPTURE_CALLS()                                                        \
  static ::flagos_hal::kit::Status stream_begin_capture(Stream& s);                          \
  static ::flagos_hal::kit::Status stream_end_capture(Stream& s, CapturedWork& work);       \
  static ::flagos_hal::kit::Status capture_instantiate(CapturedWork& work, Replay& replay); \
  static ::flagos_hal::kit::Status capture_destroy(CapturedWork& work);                     \
  static ::flagos_hal::kit::Status replay_launch(Replay& replay, Stream& s);                \
  static ::flagos_hal::kit::Status replay_destroy(Replay& replay);

namespace flagos_hal {
namespace kit {

// What the kit keeps for every capture and replay; the vendor's types derive from these.
struct CapturedWorkBase {
  int device = 0;
};
struct ReplayBase {
  int device = 0;
};

namespace detail {
template <class V, class = void>
struct HasCapture : std::false_type {};
template <class V>
struct HasCapture<V, std::void_t<typename V::Replay>> : std::true_type {};
}  // namespace detail

// The capture entries of Hal<V> (kit.hpp), for a vendor class with a Replay.
template <class V, class H>
struct CaptureRuntime {
  using CapturedWork = typename V::CapturedWork;
  using Replay = typename V::Replay;
  using Stream = typename V::Stream;
  static_assert(std::is_base_of<CapturedWorkBase, CapturedWork>::value,
                "V::CapturedWork must derive from kit::CapturedWorkBase");
  static_assert(std::is_base_of<ReplayBase, Replay>::value, "V::Replay must derive from kit::ReplayBase");

  struct State {
    HandleRegistry<CapturedWork> captures;
    HandleRegistry<Replay> replays;
  };
  static State& state() {
    static auto* s = new State;  // never destroyed: calls may come during exit
    return *s;
  }

  static Status begin(flagos_stream_t stream) {
    Stream* s = H::stream(stream);
    if (!s) return fail(FLAGOS_ERROR_INVALID_HANDLE, "stream_begin_capture: unknown or destroyed stream");
    if (s->is_default) {
      return fail(FLAGOS_ERROR_INVALID_VALUE,
                  "stream_begin_capture: a default stream cannot capture; capture on a created stream");
    }
    int idle = Stream::kNotCapturing;
    if (!s->capture_state.compare_exchange_strong(idle, Stream::kCapturing)) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_begin_capture: the stream is already capturing");
    }
    s->capture_invalidated_by.store(nullptr);
    Status st = H::enter_device(s->device);
    if (st == FLAGOS_SUCCESS) st = V::stream_begin_capture(*s);
    if (st != FLAGOS_SUCCESS) s->capture_state.store(Stream::kNotCapturing);
    return st;
  }
  static Status end(flagos_stream_t stream, flagos_capture_t* capture) {
    if (!capture) return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_end_capture: capture is NULL");
    Stream* s = H::stream(stream);
    if (!s) return fail(FLAGOS_ERROR_INVALID_HANDLE, "stream_end_capture: unknown or destroyed stream");
    if (s->capture_state.load() == Stream::kNotCapturing) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_end_capture: the stream is not capturing");
    }
    auto work = std::make_shared<CapturedWork>();
    work->device = s->device;
    FLAGOS_KIT_TRY(H::enter_device(s->device));
    // Not capturing from here on, before the vendor takes the recording: work queued by
    // another thread meanwhile runs, rather than landing in a recording no capture holds.
    int was = s->capture_state.exchange(Stream::kNotCapturing);
    Status st = V::stream_end_capture(*s, *work);
    if (was == Stream::kInvalidated) {
      const char* by = s->capture_invalidated_by.load();
      return fail(FLAGOS_ERROR_INVALID_VALUE,
                  "stream_end_capture: the capture was invalidated by %s on the capturing stream; "
                  "nothing was captured", by ? by : "a call");
    }
    FLAGOS_KIT_TRY(st);
    state().captures.add(work);
    *capture = reinterpret_cast<flagos_capture_t>(work.get());
    return FLAGOS_SUCCESS;
  }
  static Status is_capturing(flagos_stream_t stream, int* capturing) {
    if (!capturing) return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_is_capturing: capturing is NULL");
    Stream* s = H::stream(stream);
    if (!s) return fail(FLAGOS_ERROR_INVALID_HANDLE, "stream_is_capturing: unknown or destroyed stream");
    *capturing = s->capturing() ? 1 : 0;
    return FLAGOS_SUCCESS;
  }
  static Status instantiate(flagos_capture_t capture, flagos_replay_t* replay) {
    if (!replay) return fail(FLAGOS_ERROR_INVALID_VALUE, "capture_instantiate: replay is NULL");
    std::shared_ptr<CapturedWork> work = state().captures.find(capture);
    if (!work) return fail(FLAGOS_ERROR_INVALID_HANDLE, "capture_instantiate: unknown or destroyed capture");
    auto r = std::make_shared<Replay>();
    r->device = work->device;
    FLAGOS_KIT_TRY(H::enter_device(work->device));
    FLAGOS_KIT_TRY(V::capture_instantiate(*work, *r));
    state().replays.add(r);
    *replay = reinterpret_cast<flagos_replay_t>(r.get());
    return FLAGOS_SUCCESS;
  }
  static Status destroy_capture(flagos_capture_t capture) {
    bool found = false;
    std::shared_ptr<CapturedWork> work =
        state().captures.remove_if(capture, [](const CapturedWork&) { return true; }, &found);
    if (!work) return fail(FLAGOS_ERROR_INVALID_HANDLE, "capture_destroy: unknown or already destroyed capture");
    return V::capture_destroy(*work);
  }
  static Status launch(flagos_replay_t replay, flagos_stream_t stream) {
    Replay* r = state().replays.find_cached(replay);
    if (!r) return fail(FLAGOS_ERROR_INVALID_HANDLE, "replay_launch: unknown or destroyed replay");
    Stream* s = H::stream(stream);
    if (!s) return fail(FLAGOS_ERROR_INVALID_HANDLE, "replay_launch: unknown or destroyed stream");
    if (s->device != r->device) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "replay_launch: the work was captured on device %d, the stream is on %d",
                  r->device, s->device);
    }
    FLAGOS_KIT_TRY(H::enter_call(Op::kReplayLaunch));
    FLAGOS_KIT_TRY(H::enter_device(s->device));
    return V::replay_launch(*r, *s);
  }
  static Status destroy_replay(flagos_replay_t replay) {
    bool found = false;
    std::shared_ptr<Replay> r = state().replays.remove_if(replay, [](const Replay&) { return true; }, &found);
    if (!r) return fail(FLAGOS_ERROR_INVALID_HANDLE, "replay_destroy: unknown or already destroyed replay");
    return V::replay_destroy(*r);
  }
};

}  // namespace kit
}  // namespace flagos_hal

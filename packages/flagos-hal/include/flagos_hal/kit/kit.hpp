// flagos HAL kit: everything a flagos HAL does the same way whatever the chip, written once.
//
// A vendor writes one class of static functions, its runtime's calls (the contract is
// below), and ends one source file with FLAGOS_HAL_KIT_ENTRY(ThatClass). The kit builds
// the ABI's function table around it and implements the ABI's rules (flagos_hal.h):
//
//  - argument checks: NULL out-parameters, size-0 rules, unknown memcpy kinds and event
//    flags, device ranges, unknown pointers (free, host_free) and handles (streams, events),
//    and, for HALs that ask for it, copies and memsets outside live device allocations;
//  - the thread-local last-error message, the status texts, the version text;
//  - struct_size handling of device properties;
//  - the current device per host thread, and the device each runtime call runs on: the
//    vendor's activate(device) before it, the owner of a synchronous copy's pointers;
//  - sizes no device can serve (over its total memory, over the machine's for pinned
//    memory) refused before the runtime sees them;
//  - the allocation registry (pointer attributes, inner pointers, wrong-device frees);
//  - stream and event registries: lazily created default streams that cannot be
//    destroyed, destruction after queued work, never-recorded events that count as
//    complete, elapsed-time rules, priority clamping;
//  - opening the runtime once, reporting zero devices (with the reason) when it is absent,
//    refusing a forked child of an initialized parent when the runtime cannot survive fork;
//  - fault injection before each runtime call (faults.hpp: FLAGOS_<NAME>_FAULT, and at run
//    time through the test control, flagos_hal/test_control.h), then an interception
//    point of the vendor's;
//  - the count of live streams and events (the test control's leak check).
//
// Header-only: it compiles into the HAL, adds no run-time dependency, and changes nothing
// in the ABI; a HAL written without it is just as valid.
//
// ---- the vendor contract -----------------------------------------------------------
//
//   struct Acme : flagos_hal::kit::VendorDefaults {     // defaults for the policies below
//     static constexpr const char* kName = "acme";      // get_name
//     static constexpr flagos_native_device_t kNativeDevice = FLAGOS_NATIVE_NONE;
//     struct Stream : kit::StreamBase { ... };          // your per-stream state
//     struct Event : kit::EventBase { ... };            // your per-event state
//     FLAGOS_HAL_KIT_RUNTIME_CALLS()                    // declares the calls listed there
//     // Optional; the kit's behaviour when absent is in parentheses.
//     static Status activate(int device);           // make `device` the one the next runtime
//                                                    // calls of this thread address (nothing)
//     static Status set_device(int device);         // set_device's extra work (nothing)
//     static Status device_synchronize(int device);  // (synchronize each stream of the device)
//     static Status pointer_attributes(const void* ptr, flagos_pointer_attributes_t* attr);
//                                                    // (answer from the allocation registry)
//     static Status intercept(kit::Op op);           // non-SUCCESS fails the call (nothing)
//   };
//   FLAGOS_HAL_KIT_ENTRY(Acme)                        // in one source file
//
// The vendor defines each call of FLAGOS_HAL_KIT_RUNTIME_CALLS (`Status Acme::malloc(...)`).
// Failures are reported with kit::fail(status, "printf format", ...), which records the
// message; the kit copies results to the caller's out-parameters only on SUCCESS.
#pragma once

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "flagos_hal/flagos_hal.h"
#include "flagos_hal/kit/capture.hpp"
#include "flagos_hal/kit/errors.hpp"
#include "flagos_hal/kit/faults.hpp"
#include "flagos_hal/kit/graph.hpp"
#include "flagos_hal/kit/kernels.hpp"
#include "flagos_hal/kit/registry.hpp"
#include "flagos_hal/status_text.h"
#include "flagos_hal/test_control.h"

// The runtime calls a vendor class defines, declared inside it (after its Stream and Event
// types). The kit has checked the arguments before each call: devices are in range,
// sizes > 0, pointers non-NULL, handles live.
#define FLAGOS_HAL_KIT_RUNTIME_CALLS()                                                       \
  /* Once, before any call that needs the device: load the runtime, count the devices. A  \
     failure (kit::fail(FLAGOS_ERROR_NO_DEVICE, "why")) makes the HAL report 0 devices   \
     and answer NO_DEVICE with that reason. */                                             \
  static ::flagos_hal::kit::Status open(int* device_count);                                \
  static std::string version(); /* after open: runtime and driver versions */              \
  /* props arrives zeroed (native_device_index -1): fill what the runtime knows. */        \
  static ::flagos_hal::kit::Status properties(int device, flagos_device_properties_t* props); \
  static ::flagos_hal::kit::Status mem_get_info(int device, size_t* free_bytes, size_t* total_bytes); \
  /* memory: malloc >= 256-byte aligned; free/host_free get a live allocation and its size; \
     host_malloc is page-locked memory. memcpy/memset are synchronous (complete on return), \
     run on the device given: the owner of the device-side pointer (a copy's other side's,  \
     or the thread's current device, when unknown); -1 for a host side. */                  \
  static ::flagos_hal::kit::Status malloc(int device, size_t size, void** ptr);            \
  static ::flagos_hal::kit::Status free(int device, void* ptr, size_t size);               \
  static ::flagos_hal::kit::Status host_malloc(size_t size, void** ptr);                   \
  static ::flagos_hal::kit::Status host_free(void* ptr, size_t size);                      \
  static ::flagos_hal::kit::Status memcpy(void* dst, const void* src, size_t size,         \
                                          flagos_memcpy_kind_t kind, int dst_device,       \
                                          int src_device);                                 \
  static ::flagos_hal::kit::Status memset(void* ptr, int value, size_t size, int device);  \
  static ::flagos_hal::kit::Status memcpy_async(void* dst, const void* src, size_t size,   \
                                                flagos_memcpy_kind_t kind, Stream& stream); \
  static ::flagos_hal::kit::Status memset_async(void* ptr, int value, size_t size, Stream& stream); \
  /* streams: device, priority (clamped) and is_default are set; destroy lets queued work \
     finish; query answers SUCCESS or NOT_READY. priority_range is asked until it succeeds. */ \
  static ::flagos_hal::kit::Status priority_range(int* least, int* greatest);              \
  static ::flagos_hal::kit::Status stream_create(Stream& stream);                          \
  static ::flagos_hal::kit::Status stream_destroy(Stream& stream);                         \
  static ::flagos_hal::kit::Status stream_query(Stream& stream);                           \
  static ::flagos_hal::kit::Status stream_synchronize(Stream& stream);                     \
  static ::flagos_hal::kit::Status stream_wait_event(Stream& stream, Event& event);        \
  static void* stream_native_handle(Stream& stream); /* the twin's stream, or nullptr */   \
  /* events: flags is set; query, synchronize, wait and elapsed time only see recorded    \
     events, elapsed time only timing-enabled ones. */                                     \
  static ::flagos_hal::kit::Status event_create(Event& event);                             \
  static ::flagos_hal::kit::Status event_destroy(Event& event);                            \
  static ::flagos_hal::kit::Status event_record(Event& event, Stream& stream);             \
  static ::flagos_hal::kit::Status event_query(Event& event);                              \
  static ::flagos_hal::kit::Status event_synchronize(Event& event);                        \
  static ::flagos_hal::kit::Status event_elapsed_time(float* ms, Event& start, Event& end);

namespace flagos_hal {
namespace kit {

// What the kit sets on every stream; a vendor's Stream derives from it.
struct StreamBase {
  int device = 0;
  int priority = 0;
  bool is_default = false;

  // Stream capture (capture.hpp): whether the stream records its work instead of running it.
  static constexpr int kNotCapturing = 0, kCapturing = 1, kInvalidated = 2;
  std::atomic<int> capture_state{kNotCapturing};
  std::atomic<const char*> capture_invalidated_by{nullptr};  // the call, a literal
  bool capturing() const { return capture_state.load(std::memory_order_acquire) != kNotCapturing; }
  // For a call that may not meet a capturing stream: invalidates the capture and returns
  // INVALID_VALUE naming `call`; SUCCESS when the stream does not capture.
  Status refuse_while_capturing(const char* call) {
    if (!capturing()) return FLAGOS_SUCCESS;  // a load, not a read-modify-write, when idle
    int state = kCapturing;
    if (capture_state.compare_exchange_strong(state, kInvalidated)) {
      capture_invalidated_by.store(call);
    } else if (state == kNotCapturing) {
      return FLAGOS_SUCCESS;
    }
    return fail(FLAGOS_ERROR_INVALID_VALUE,
                "%s: the stream is capturing; its capture is invalidated (wait for a capturing "
                "stream's work only after stream_end_capture)", call);
  }
};

// What the kit sets on every event; a vendor's Event derives from it.
struct EventBase {
  unsigned flags = 0;            // FLAGOS_EVENT_*
  std::atomic<int> device{-1};   // device of the last successful record; -1: never recorded
  bool recorded() const { return device.load(std::memory_order_acquire) >= 0; }
};

// Policies, overridden by declaring the same constant in the vendor class.
struct VendorDefaults {
  // Copies and memsets must lie inside a live device allocation of this HAL (else
  // INVALID_VALUE). Off for runtimes whose pointers are shared with another allocator
  // (CUDA: torch.cuda's memory is valid HAL memory).
  static constexpr bool kCheckRanges = false;
  // Synchronous memcpy/memset first wait for the default stream of the devices involved.
  // On for runtimes whose synchronous copy is not ordered after the default stream's work
  // by the runtime itself (a simulator whose streams are host threads).
  static constexpr bool kSyncWaitsForDefaultStream = false;
  // A child process forked after the runtime was opened gets NO_DEVICE (CUDA-like
  // runtimes cannot be used across fork()).
  static constexpr bool kRefuseAfterFork = false;
};

namespace detail {
#define FLAGOS_KIT_DETECT(trait, expr)                                            \
  template <class V, class = void>                                                \
  struct trait : std::false_type {};                                              \
  template <class V>                                                              \
  struct trait<V, std::void_t<decltype(expr)>> : std::true_type {};
FLAGOS_KIT_DETECT(HasActivate, V::activate(0))
FLAGOS_KIT_DETECT(HasSetDevice, V::set_device(0))
FLAGOS_KIT_DETECT(HasDeviceSynchronize, V::device_synchronize(0))
FLAGOS_KIT_DETECT(HasPointerAttributes,
                  V::pointer_attributes(nullptr, static_cast<flagos_pointer_attributes_t*>(nullptr)))
FLAGOS_KIT_DETECT(HasIntercept, V::intercept(Op::kMalloc))
FLAGOS_KIT_DETECT(HasHostTasks, &V::stream_launch_host_task)
#undef FLAGOS_KIT_DETECT

// Entry F as the table calls it: an exception (a vendor's, or std::bad_alloc from the
// kit's own bookkeeping) becomes a status and a message, never a crash through the C ABI.
template <auto F>
struct Guarded;
template <class... A, Status (*F)(A...)>
struct Guarded<F> {
  static Status call(A... args) noexcept {
    try {
      return F(args...);
    } catch (const std::bad_alloc&) {
      return note(FLAGOS_ERROR_OUT_OF_MEMORY, "out of host memory");
    } catch (const std::exception& e) {
      return note(FLAGOS_ERROR_UNKNOWN, e.what());
    } catch (...) {
      return note(FLAGOS_ERROR_UNKNOWN, "unknown C++ exception");
    }
  }
  static Status note(Status status, const char* what) noexcept {
    try {
      fail_text(status, std::string("flagos HAL: ") + what);
    } catch (...) {  // no memory even for the message: the status alone
    }
    return status;
  }
};

inline bool valid_kind(flagos_memcpy_kind_t kind) {
  return kind >= FLAGOS_MEMCPY_HOST_TO_HOST && kind <= FLAGOS_MEMCPY_DEVICE_TO_DEVICE;
}
inline bool dst_on_device(flagos_memcpy_kind_t k) {
  return k == FLAGOS_MEMCPY_HOST_TO_DEVICE || k == FLAGOS_MEMCPY_DEVICE_TO_DEVICE;
}
inline bool src_on_device(flagos_memcpy_kind_t k) {
  return k == FLAGOS_MEMCPY_DEVICE_TO_HOST || k == FLAGOS_MEMCPY_DEVICE_TO_DEVICE;
}
}  // namespace detail

// The HAL built from vendor class V: the table entries, the shared state, and a few
// helpers a vendor may call (Hal<V>::current_device, ::device_count, ::device_streams).
template <class V>
class Hal {
 public:
  using Stream = typename V::Stream;
  using Event = typename V::Event;
  static_assert(std::is_base_of<StreamBase, Stream>::value, "V::Stream must derive from kit::StreamBase");
  static_assert(std::is_base_of<EventBase, Event>::value, "V::Event must derive from kit::EventBase");

  // ---- helpers for the vendor ----------------------------------------------------------
  static int current_device() { return t_device(); }
  static int device_count() { return state().count; }
  // The live stream behind `handle` (nullptr when unknown or destroyed), and the handle of
  // a stream: for runtime objects that carry their HAL stream.
  static Stream* stream(flagos_stream_t handle) { return stream_of(handle); }
  static flagos_stream_t handle(Stream& s) { return handle_of(&s); }
  // Live streams of `device` (default stream included), for a device-wide synchronize.
  static std::vector<std::shared_ptr<Stream>> device_streams(int device) {
    return state().streams.select([device](const Stream& s) { return s.device == device; });
  }

  // For the kit's graph runtime (graph.hpp): the checks of the other calls.
  static Status require_device(int device, const char* fn) { return check_device(device, fn); }
  static int device_of_range(const void* p, size_t n) { return state().allocs.device_of_range(p, n); }
  // For the tensor descriptors (kernels.hpp): the device owning memory at `p`, -1 unknown.
  static int device_of_memory(const void* p) { return owner_of(p); }
  // For the kernel extension (kernels.hpp): the vendor's activate(device) before its calls.
  static Status enter_device(int device) { return activate(device); }
  // For the kernel extension: the fault injection and the vendor's intercept of `op`.
  static Status enter_call(Op op) { return intercept(op); }

  static const flagos_hal_table_t* table() {
    static const flagos_hal_table_t t = make_table();
    return &t;
  }

 private:
  struct State {
    std::once_flag once;
    std::atomic<bool> opened{false};
    bool ok = false;      // open succeeded with at least one device
    int count = 0;        // devices (0 unless ok)
    std::string error;    // why not ok
    std::string version;  // get_version text
    std::atomic<bool> forked{false};
    std::unique_ptr<std::atomic<uint64_t>[]> total;  // per device, 0 until known
    AllocationRegistry allocs;
    HandleRegistry<Stream> streams;
    HandleRegistry<Event> events;
    std::mutex defaults_mu;
    std::unique_ptr<std::atomic<Stream*>[]> defaults;  // per device, created on first use
    std::atomic<uint64_t> live_streams{0}, live_events{0};  // the test control's leak check
    std::mutex priority_mu;
    std::atomic<bool> priority_known{false};
    int least = 0, greatest = 0;
  };
  static State& state() {
    static State* s = new State;  // never destroyed: calls may come during exit
    return *s;
  }
  static int& t_device() {
    thread_local int device = 0;
    return device;
  }

  static void open_once() {
    State& s = state();
    int n = 0;
    Status st = V::open(&n);
    if (st != FLAGOS_SUCCESS) {
      s.error = last_error();
    } else if (n <= 0) {
      s.error = "the runtime reports no devices";
    } else {
      s.count = n;
      s.total.reset(new std::atomic<uint64_t>[n]);
      s.defaults.reset(new std::atomic<Stream*>[n]);
      for (int d = 0; d < n; ++d) {
        s.total[d].store(0);
        s.defaults[d].store(nullptr);
      }
      s.ok = true;
      if (V::kRefuseAfterFork) pthread_atfork(nullptr, nullptr, [] { state().forked.store(true); });
    }
    last_error().clear();
    s.opened.store(true, std::memory_order_release);
  }
  static State& opened() {
    State& s = state();
    if (!s.opened.load(std::memory_order_acquire)) std::call_once(s.once, open_once);
    return s;
  }
  // The runtime is open, has devices, and may be used in this process.
  static bool usable() {
    State& s = opened();
    return s.ok && !(V::kRefuseAfterFork && s.forked.load(std::memory_order_relaxed));
  }
  // usable(), else NO_DEVICE saying why.
  static Status ready() {
    if (usable()) return FLAGOS_SUCCESS;
    State& s = state();
    if (!s.ok) return fail(FLAGOS_ERROR_NO_DEVICE, "flagos %s HAL: %s", V::kName, s.error.c_str());
    return fail(FLAGOS_ERROR_NO_DEVICE,
                "flagos %s HAL: the runtime was initialized before fork(); a forked child "
                "cannot use it (use the 'spawn' start method for subprocesses)", V::kName);
  }
  static Status check_device(int device, const char* fn) {
    FLAGOS_KIT_TRY(ready());
    int n = state().count;
    if (device >= 0 && device < n) return FLAGOS_SUCCESS;
    return fail(FLAGOS_ERROR_INVALID_DEVICE, "%s: device %d out of range (this HAL has %d device%s)",
                fn, device, n, n == 1 ? "" : "s");
  }
  static Status null_arg(const char* fn, const char* what) {
    return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: %s is NULL", fn, what);
  }
  // Before each runtime call that works on one device (see V::activate).
  static Status activate(int device) {
    if constexpr (detail::HasActivate<V>::value) return V::activate(device);
    else return FLAGOS_SUCCESS;
  }
  static Status intercept(Op op) {
    FLAGOS_KIT_TRY(faults().check(op));
    if constexpr (detail::HasIntercept<V>::value) return V::intercept(op);
    else return FLAGOS_SUCCESS;
  }
  static FaultInjector& faults() {
    static FaultInjector* f = new FaultInjector(V::kName);  // never destroyed: calls may come during exit
    return *f;
  }
  static Status bad_stream(const char* fn) {
    return fail(FLAGOS_ERROR_INVALID_HANDLE, "%s: unknown or destroyed stream", fn);
  }
  static Status bad_event(const char* fn) {
    return fail(FLAGOS_ERROR_INVALID_HANDLE, "%s: unknown or destroyed event", fn);
  }
  static Stream* stream_of(flagos_stream_t h) { return state().streams.find_cached(h); }
  static flagos_stream_t handle_of(Stream* s) { return reinterpret_cast<flagos_stream_t>(s); }
  static flagos_event_t handle_of(Event* e) { return reinterpret_cast<flagos_event_t>(e); }

  // The runtime's priority range, asked until it answers once.
  static Status priorities(int* least, int* greatest) {
    State& s = state();
    if (!s.priority_known.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(s.priority_mu);
      if (!s.priority_known.load(std::memory_order_relaxed)) {
        FLAGOS_KIT_TRY(activate(t_device()));
        FLAGOS_KIT_TRY(V::priority_range(&s.least, &s.greatest));
        s.priority_known.store(true, std::memory_order_release);
      }
    }
    *least = s.least;
    *greatest = s.greatest;
    return FLAGOS_SUCCESS;
  }
  // Total memory of `device` (0 when the runtime cannot say), asked once.
  static uint64_t total_memory(int device) {
    std::atomic<uint64_t>& slot = state().total[device];
    uint64_t t = slot.load(std::memory_order_relaxed);
    if (t) return t;
    flagos_device_properties_t p;
    std::memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    std::string saved = last_error();
    if (V::properties(device, &p) == FLAGOS_SUCCESS) slot.store(t = p.total_memory);
    last_error() = saved;
    return t;
  }
  static Status default_stream(int device, Stream** out) {
    State& s = state();
    if ((*out = s.defaults[device].load(std::memory_order_acquire))) return FLAGOS_SUCCESS;
    std::lock_guard<std::mutex> lock(s.defaults_mu);
    if ((*out = s.defaults[device].load(std::memory_order_acquire))) return FLAGOS_SUCCESS;
    auto obj = std::make_shared<Stream>();
    obj->device = device;
    obj->is_default = true;
    FLAGOS_KIT_TRY(V::stream_create(*obj));
    s.streams.add(obj);  // the registry keeps it for the process lifetime
    ++s.live_streams;
    s.defaults[device].store(obj.get(), std::memory_order_release);
    *out = obj.get();
    return FLAGOS_SUCCESS;
  }
  static Status sync_stream(Stream& s) {
    FLAGOS_KIT_TRY(activate(s.device));
    return V::stream_synchronize(s);
  }
  // The default stream of each device a synchronous op touches, drained first.
  static void wait_default_streams(std::initializer_list<int> devices) {
    if constexpr (V::kSyncWaitsForDefaultStream) {
      for (int d : devices) {
        Stream* s = d >= 0 ? state().defaults[d].load(std::memory_order_acquire) : nullptr;
        if (s) sync_stream(*s);
      }
    }
  }
  static Status check_range(const void* p, size_t n, const char* fn, const char* what, int* dev) {
    *dev = state().allocs.device_of_range(p, n);
    if (*dev >= 0) return FLAGOS_SUCCESS;
    return fail(FLAGOS_ERROR_INVALID_VALUE,
                "%s: %s %p (%zu bytes) is not inside a live device allocation", fn, what, p, n);
  }
  // The device owning device memory at `p`: this HAL's allocation, else what the vendor's
  // pointer_attributes says (memory of another allocator), else -1.
  static int owner_of(const void* p) {
    int d = state().allocs.device_of_range(p, 1);
    if constexpr (detail::HasPointerAttributes<V>::value) {
      flagos_pointer_attributes_t a{FLAGOS_POINTER_UNKNOWN, -1, nullptr, 0};
      std::string saved = last_error();
      if (d < 0 && V::pointer_attributes(p, &a) == FLAGOS_SUCCESS && a.type == FLAGOS_POINTER_DEVICE &&
          a.device >= 0 && a.device < state().count) {
        d = a.device;
      }
      last_error() = saved;
    }
    return d;
  }
  // The devices a synchronous copy runs on (see FLAGOS_HAL_KIT_RUNTIME_CALLS).
  static void copy_devices(void* dst, const void* src, flagos_memcpy_kind_t kind, int devs[2]) {
    bool on[2] = {detail::dst_on_device(kind), detail::src_on_device(kind)};
    const void* p[2] = {dst, src};
    for (int i = 0; i < 2; ++i) {
      if (on[i] && devs[i] < 0) devs[i] = owner_of(p[i]);
    }
    for (int i = 0; i < 2; ++i) {
      if (on[i] && devs[i] < 0) devs[i] = devs[1 - i] >= 0 ? devs[1 - i] : t_device();
    }
  }
  // Kind, NULL pointers and, with kCheckRanges, device ranges of a copy; devices to devs.
  static Status check_copy(void* dst, const void* src, size_t size, flagos_memcpy_kind_t kind,
                           const char* fn, int devs[2]) {
    devs[0] = devs[1] = -1;
    if (!detail::valid_kind(kind)) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: unknown memcpy kind %d", fn, static_cast<int>(kind));
    }
    if (size == 0) return FLAGOS_SUCCESS;
    if (!dst || !src) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: NULL %s pointer for a %zu-byte copy", fn,
                  dst ? "source" : "destination", size);
    }
    if (kind != FLAGOS_MEMCPY_HOST_TO_HOST) FLAGOS_KIT_TRY(ready());
    if constexpr (V::kCheckRanges) {
      if (detail::dst_on_device(kind)) FLAGOS_KIT_TRY(check_range(dst, size, fn, "dst", &devs[0]));
      if (detail::src_on_device(kind)) FLAGOS_KIT_TRY(check_range(src, size, fn, "src", &devs[1]));
    }
    return FLAGOS_SUCCESS;
  }
  static Status check_fill(void* ptr, size_t size, const char* fn, int* dev) {
    *dev = -1;
    if (size == 0) return FLAGOS_SUCCESS;
    if (!ptr) return null_arg(fn, "ptr");
    FLAGOS_KIT_TRY(ready());
    if constexpr (V::kCheckRanges) FLAGOS_KIT_TRY(check_range(ptr, size, fn, "ptr", dev));
    return FLAGOS_SUCCESS;
  }

  // ---- identity ------------------------------------------------------------------------
  static Status get_name(const char** name) {
    if (!name) return null_arg("get_name", "name");
    *name = V::kName;
    return FLAGOS_SUCCESS;
  }
  static Status get_version(const char** version) {
    if (!version) return null_arg("get_version", "version");
    static std::once_flag once;
    std::call_once(once, [] {
      State& s = opened();
      s.version = V::version();
      if (!s.ok) s.version += "; unavailable: " + s.error;
    });
    *version = state().version.c_str();
    return FLAGOS_SUCCESS;
  }
  static Status get_error_string(Status status, const char** text) {
    if (!text) return null_arg("get_error_string", "text");
    *text = flagos_status_text(status);
    return FLAGOS_SUCCESS;
  }
  static Status get_last_error_message(const char** text) {
    if (!text) return FLAGOS_ERROR_INVALID_VALUE;  // keeps the message it would return
    *text = last_error().c_str();
    return FLAGOS_SUCCESS;
  }
  static Status get_native_device(flagos_native_device_t* kind) {
    if (!kind) return null_arg("get_native_device", "kind");
    *kind = V::kNativeDevice;
    return FLAGOS_SUCCESS;
  }

  // ---- devices -------------------------------------------------------------------------
  static Status get_device_count(int* count) {
    if (!count) return null_arg("get_device_count", "count");
    *count = opened().count;
    return FLAGOS_SUCCESS;
  }
  static Status get_device(int* device) {
    if (!device) return null_arg("get_device", "device");
    FLAGOS_KIT_TRY(ready());
    *device = t_device();
    return FLAGOS_SUCCESS;
  }
  static Status set_device(int device) {
    FLAGOS_KIT_TRY(check_device(device, "set_device"));
    if constexpr (detail::HasSetDevice<V>::value) FLAGOS_KIT_TRY(V::set_device(device));
    t_device() = device;
    return FLAGOS_SUCCESS;
  }
  static Status get_device_properties(int device, flagos_device_properties_t* props) {
    if (!props) return null_arg("get_device_properties", "props");
    if (props->struct_size < sizeof(uint32_t)) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "get_device_properties: props->struct_size (%u) is too small",
                  props->struct_size);
    }
    FLAGOS_KIT_TRY(check_device(device, "get_device_properties"));
    flagos_device_properties_t p;
    std::memset(&p, 0, sizeof p);
    p.native_device_index = -1;
    FLAGOS_KIT_TRY(V::properties(device, &p));
    p.name[sizeof p.name - 1] = '\0';
    p.struct_size = props->struct_size;
    std::memcpy(props, &p, props->struct_size < sizeof p ? props->struct_size : sizeof p);
    return FLAGOS_SUCCESS;
  }
  static Status device_synchronize(int device) {
    FLAGOS_KIT_TRY(check_device(device, "device_synchronize"));
    Status capturing = FLAGOS_SUCCESS;
    for (auto& s : device_streams(device)) {
      if (s->capturing()) capturing = s->refuse_while_capturing("device_synchronize");
    }
    FLAGOS_KIT_TRY(capturing);
    FLAGOS_KIT_TRY(intercept(Op::kDeviceSynchronize));
    if constexpr (detail::HasDeviceSynchronize<V>::value) {
      FLAGOS_KIT_TRY(activate(device));
      return V::device_synchronize(device);
    } else {
      for (auto& s : device_streams(device)) FLAGOS_KIT_TRY(sync_stream(*s));
      return FLAGOS_SUCCESS;
    }
  }
  static Status mem_get_info(int device, size_t* free_bytes, size_t* total_bytes) {
    if (!free_bytes || !total_bytes) return null_arg("mem_get_info", "an output");
    FLAGOS_KIT_TRY(check_device(device, "mem_get_info"));
    size_t f = 0, t = 0;
    FLAGOS_KIT_TRY(activate(device));
    FLAGOS_KIT_TRY(V::mem_get_info(device, &f, &t));
    *free_bytes = f;
    *total_bytes = t;
    return FLAGOS_SUCCESS;
  }

  // ---- memory --------------------------------------------------------------------------
  static Status dev_malloc(int device, size_t size, void** ptr) {
    if (!ptr) return null_arg("malloc", "ptr");
    FLAGOS_KIT_TRY(check_device(device, "malloc"));
    FLAGOS_KIT_TRY(intercept(Op::kMalloc));
    if (size == 0) {
      *ptr = nullptr;
      return FLAGOS_SUCCESS;
    }
    // Runtimes may abort or misbehave on absurd sizes (SIZE_MAX): refuse them here.
    uint64_t total = total_memory(device);
    if (total && size > total) {
      return fail(FLAGOS_ERROR_OUT_OF_MEMORY,
                  "malloc: %zu bytes requested on device %d, which has %llu bytes in total", size,
                  device, static_cast<unsigned long long>(total));
    }
    void* p = nullptr;
    FLAGOS_KIT_TRY(activate(device));
    FLAGOS_KIT_TRY(V::malloc(device, size, &p));
    state().allocs.add(p, size, device);
    *ptr = p;
    return FLAGOS_SUCCESS;
  }
  static Status dev_free(int device, void* ptr) {
    if (!ptr) return FLAGOS_SUCCESS;
    FLAGOS_KIT_TRY(check_device(device, "free"));
    FLAGOS_KIT_TRY(intercept(Op::kFree));
    const char* why = "";
    Allocation a = state().allocs.take(ptr, device, &why);
    if (!a.found()) return fail(FLAGOS_ERROR_INVALID_HANDLE, "free: %p %s (device %d)", ptr, why, device);
    FLAGOS_KIT_TRY(activate(device));
    return V::free(device, ptr, a.size);
  }
  static Status host_malloc(size_t size, void** ptr) {
    if (!ptr) return null_arg("host_malloc", "ptr");
    FLAGOS_KIT_TRY(ready());
    FLAGOS_KIT_TRY(intercept(Op::kHostMalloc));
    if (size == 0) {
      *ptr = nullptr;
      return FLAGOS_SUCCESS;
    }
    // No more can be pinned than the machine has.
    uint64_t phys = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
    if (size > phys) {
      return fail(FLAGOS_ERROR_OUT_OF_MEMORY,
                  "host_malloc: %zu bytes of pinned host memory requested, the machine has %llu",
                  size, static_cast<unsigned long long>(phys));
    }
    void* p = nullptr;
    FLAGOS_KIT_TRY(V::host_malloc(size, &p));
    state().allocs.add(p, size, -1);
    *ptr = p;
    return FLAGOS_SUCCESS;
  }
  static Status host_free(void* ptr) {
    if (!ptr) return FLAGOS_SUCCESS;
    FLAGOS_KIT_TRY(ready());
    FLAGOS_KIT_TRY(intercept(Op::kHostFree));
    const char* why = "";
    Allocation a = state().allocs.take(ptr, -1, &why);
    if (!a.found()) return fail(FLAGOS_ERROR_INVALID_HANDLE, "host_free: %p %s", ptr, why);
    return V::host_free(ptr, a.size);
  }
  static Status copy(void* dst, const void* src, size_t size, flagos_memcpy_kind_t kind) {
    int devs[2];
    FLAGOS_KIT_TRY(check_copy(dst, src, size, kind, "memcpy", devs));
    FLAGOS_KIT_TRY(intercept(Op::kMemcpy));
    if (size == 0) return FLAGOS_SUCCESS;
    copy_devices(dst, src, kind, devs);
    wait_default_streams({devs[0], devs[1] != devs[0] ? devs[1] : -1});
    if (kind != FLAGOS_MEMCPY_HOST_TO_HOST) {
      FLAGOS_KIT_TRY(activate(kind == FLAGOS_MEMCPY_HOST_TO_DEVICE ? devs[0] : devs[1]));
    }
    return V::memcpy(dst, src, size, kind, devs[0], devs[1]);
  }
  static Status copy_async(void* dst, const void* src, size_t size, flagos_memcpy_kind_t kind,
                           flagos_stream_t stream) {
    int devs[2];
    FLAGOS_KIT_TRY(check_copy(dst, src, size, kind, "memcpy_async", devs));
    FLAGOS_KIT_TRY(ready());
    Stream* s = stream_of(stream);
    if (!s) return bad_stream("memcpy_async");
    FLAGOS_KIT_TRY(intercept(Op::kMemcpyAsync));
    if (size == 0) return FLAGOS_SUCCESS;
    FLAGOS_KIT_TRY(activate(s->device));
    return V::memcpy_async(dst, src, size, kind, *s);
  }
  static Status fill(void* ptr, int value, size_t size) {
    int dev;
    FLAGOS_KIT_TRY(check_fill(ptr, size, "memset", &dev));
    FLAGOS_KIT_TRY(intercept(Op::kMemset));
    if (size == 0) return FLAGOS_SUCCESS;
    if (dev < 0 && (dev = owner_of(ptr)) < 0) dev = t_device();
    wait_default_streams({dev});
    FLAGOS_KIT_TRY(activate(dev));
    return V::memset(ptr, value, size, dev);
  }
  static Status fill_async(void* ptr, int value, size_t size, flagos_stream_t stream) {
    int dev;
    FLAGOS_KIT_TRY(check_fill(ptr, size, "memset_async", &dev));
    FLAGOS_KIT_TRY(ready());
    Stream* s = stream_of(stream);
    if (!s) return bad_stream("memset_async");
    FLAGOS_KIT_TRY(intercept(Op::kMemsetAsync));
    if (size == 0) return FLAGOS_SUCCESS;
    FLAGOS_KIT_TRY(activate(s->device));
    return V::memset_async(ptr, value, size, *s);
  }
  static Status pointer_get_attributes(const void* ptr, flagos_pointer_attributes_t* attr) {
    if (!attr) return null_arg("pointer_get_attributes", "attr");
    flagos_pointer_attributes_t a{FLAGOS_POINTER_UNKNOWN, -1, nullptr, 0};
    if constexpr (detail::HasPointerAttributes<V>::value) {
      // No runtime (or a forked child): nothing can be this HAL's memory here.
      if (ptr && usable()) FLAGOS_KIT_TRY(V::pointer_attributes(ptr, &a));
    } else if (ptr) {
      Allocation found = state().allocs.find(ptr);
      if (found.found()) {
        a = {found.device >= 0 ? FLAGOS_POINTER_DEVICE : FLAGOS_POINTER_PINNED_HOST, found.device,
             reinterpret_cast<void*>(found.base), found.size};
      }
    }
    *attr = a;
    return FLAGOS_SUCCESS;
  }

  // ---- streams -------------------------------------------------------------------------
  static Status stream_create(int device, int priority, flagos_stream_t* stream) {
    if (!stream) return null_arg("stream_create", "stream");
    FLAGOS_KIT_TRY(check_device(device, "stream_create"));
    FLAGOS_KIT_TRY(intercept(Op::kStreamCreate));
    int least = 0, greatest = 0;
    FLAGOS_KIT_TRY(priorities(&least, &greatest));
    auto obj = std::make_shared<Stream>();
    obj->device = device;
    obj->priority = priority > least ? least : priority < greatest ? greatest : priority;
    FLAGOS_KIT_TRY(activate(device));
    FLAGOS_KIT_TRY(V::stream_create(*obj));
    state().streams.add(obj);
    ++state().live_streams;
    *stream = handle_of(obj.get());
    return FLAGOS_SUCCESS;
  }
  static Status stream_get_priority_range(int* least, int* greatest) {
    if (!least || !greatest) return null_arg("stream_get_priority_range", "an output");
    FLAGOS_KIT_TRY(ready());
    return priorities(least, greatest);
  }
  static Status stream_get_default(int device, flagos_stream_t* stream) {
    if (!stream) return null_arg("stream_get_default", "stream");
    FLAGOS_KIT_TRY(check_device(device, "stream_get_default"));
    Stream* s = nullptr;
    FLAGOS_KIT_TRY(default_stream(device, &s));
    *stream = handle_of(s);
    return FLAGOS_SUCCESS;
  }
  static Status stream_destroy(flagos_stream_t stream) {
    FLAGOS_KIT_TRY(ready());
    std::shared_ptr<Stream> s = state().streams.find(stream);
    if (!s) return bad_stream("stream_destroy");
    if (s->is_default) {
      return fail(FLAGOS_ERROR_INVALID_VALUE,
                  "stream_destroy: the default stream of device %d cannot be destroyed", s->device);
    }
    if (s->capturing()) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_destroy: the stream is capturing; end the capture first");
    }
    FLAGOS_KIT_TRY(intercept(Op::kStreamDestroy));
    bool found = false;
    if (!state().streams.remove_if(stream, [](const Stream&) { return true; }, &found)) {
      return bad_stream("stream_destroy");  // destroyed by another thread meanwhile
    }
    Status st = activate(s->device);
    if (st == FLAGOS_SUCCESS) st = V::stream_destroy(*s);
    // A failed destroy leaves the stream live and usable: back into the registry, so the
    // object (and whatever the vendor's stream owns, a worker thread say) is not dropped
    // without the vendor's stream_destroy having run.
    if (st != FLAGOS_SUCCESS) state().streams.add(s);
    else --state().live_streams;
    return st;
  }
  static Status stream_query(flagos_stream_t stream) {
    FLAGOS_KIT_TRY(ready());
    Stream* s = stream_of(stream);
    if (!s) return bad_stream("stream_query");
    FLAGOS_KIT_TRY(s->refuse_while_capturing("stream_query"));
    FLAGOS_KIT_TRY(intercept(Op::kStreamQuery));
    FLAGOS_KIT_TRY(activate(s->device));
    return V::stream_query(*s);
  }
  static Status stream_synchronize(flagos_stream_t stream) {
    FLAGOS_KIT_TRY(ready());
    Stream* s = stream_of(stream);
    if (!s) return bad_stream("stream_synchronize");
    FLAGOS_KIT_TRY(s->refuse_while_capturing("stream_synchronize"));
    FLAGOS_KIT_TRY(intercept(Op::kStreamSynchronize));
    return sync_stream(*s);
  }
  static Status stream_wait_event(flagos_stream_t stream, flagos_event_t event) {
    FLAGOS_KIT_TRY(ready());
    Stream* s = stream_of(stream);
    if (!s) return bad_stream("stream_wait_event");
    std::shared_ptr<Event> e = state().events.find(event);
    if (!e) return bad_event("stream_wait_event");
    FLAGOS_KIT_TRY(intercept(Op::kStreamWaitEvent));
    if (!e->recorded()) return FLAGOS_SUCCESS;  // never recorded: complete
    FLAGOS_KIT_TRY(activate(s->device));
    return V::stream_wait_event(*s, *e);
  }
  static Status stream_get_device(flagos_stream_t stream, int* device) {
    if (!device) return null_arg("stream_get_device", "device");
    Stream* s = stream_of(stream);
    if (!s) return bad_stream("stream_get_device");
    *device = s->device;
    return FLAGOS_SUCCESS;
  }
  // ABI 1.4's optional host tasks, for a vendor class that defines
  // stream_launch_host_task(Stream&, fn, data, release). Every refusal releases the data.
  static Status stream_launch_host_task(flagos_stream_t stream, void (*fn)(void*), void* data,
                                        void (*release)(void*)) {
    auto refused = [&](Status st) {
      if (release) release(data);
      return st;
    };
    if (!fn) return refused(null_arg("stream_launch_host_task", "fn"));
    Stream* s = stream_of(stream);
    if (!s) return refused(bad_stream("stream_launch_host_task"));
    Status st = activate(s->device);
    if (st != FLAGOS_SUCCESS) return refused(st);
    return V::stream_launch_host_task(*s, fn, data, release);
  }
  static Status stream_get_native_handle(flagos_stream_t stream, void** handle) {
    if (!handle) return null_arg("stream_get_native_handle", "handle");
    Stream* s = stream_of(stream);
    if (!s) return bad_stream("stream_get_native_handle");
    *handle = V::stream_native_handle(*s);
    return FLAGOS_SUCCESS;
  }

  // ---- events --------------------------------------------------------------------------
  static Status event_create(unsigned int flags, flagos_event_t* event) {
    if (!event) return null_arg("event_create", "event");
    if (flags & ~(FLAGOS_EVENT_DISABLE_TIMING | FLAGOS_EVENT_BLOCKING_SYNC)) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "event_create: unknown flags 0x%x", flags);
    }
    FLAGOS_KIT_TRY(ready());
    auto obj = std::make_shared<Event>();
    obj->flags = flags;
    FLAGOS_KIT_TRY(V::event_create(*obj));
    state().events.add(obj);
    ++state().live_events;
    *event = handle_of(obj.get());
    return FLAGOS_SUCCESS;
  }
  static Status event_destroy(flagos_event_t event) {
    FLAGOS_KIT_TRY(ready());
    bool found = false;
    std::shared_ptr<Event> e = state().events.remove_if(event, [](const Event&) { return true; }, &found);
    if (!e) return bad_event("event_destroy");
    --state().live_events;
    return V::event_destroy(*e);  // pending captures still complete
  }
  static Status event_record(flagos_event_t event, flagos_stream_t stream) {
    FLAGOS_KIT_TRY(ready());
    std::shared_ptr<Event> e = state().events.find(event);
    if (!e) return bad_event("event_record");
    Stream* s = stream_of(stream);
    if (!s) return bad_stream("event_record");
    FLAGOS_KIT_TRY(intercept(Op::kEventRecord));
    FLAGOS_KIT_TRY(activate(s->device));
    FLAGOS_KIT_TRY(V::event_record(*e, *s));
    e->device.store(s->device, std::memory_order_release);
    return FLAGOS_SUCCESS;
  }
  static Status event_query(flagos_event_t event) {
    FLAGOS_KIT_TRY(ready());
    std::shared_ptr<Event> e = state().events.find(event);
    if (!e) return bad_event("event_query");
    FLAGOS_KIT_TRY(intercept(Op::kEventQuery));
    if (!e->recorded()) return FLAGOS_SUCCESS;
    FLAGOS_KIT_TRY(activate(e->device.load(std::memory_order_acquire)));
    return V::event_query(*e);
  }
  static Status event_synchronize(flagos_event_t event) {
    FLAGOS_KIT_TRY(ready());
    std::shared_ptr<Event> e = state().events.find(event);
    if (!e) return bad_event("event_synchronize");
    FLAGOS_KIT_TRY(intercept(Op::kEventSynchronize));
    if (!e->recorded()) return FLAGOS_SUCCESS;
    FLAGOS_KIT_TRY(activate(e->device.load(std::memory_order_acquire)));
    return V::event_synchronize(*e);
  }
  static Status event_elapsed_time(float* ms, flagos_event_t start, flagos_event_t end) {
    if (!ms) return null_arg("event_elapsed_time", "ms");
    FLAGOS_KIT_TRY(ready());
    std::shared_ptr<Event> a = state().events.find(start), b = state().events.find(end);
    if (!a || !b) return bad_event("event_elapsed_time");
    for (const Event* e : {a.get(), b.get()}) {
      const char* which = e == a.get() ? "start" : "end";
      if (e->flags & FLAGOS_EVENT_DISABLE_TIMING) {
        return fail(FLAGOS_ERROR_INVALID_HANDLE,
                    "event_elapsed_time: the %s event was created with FLAGOS_EVENT_DISABLE_TIMING", which);
      }
      if (!e->recorded()) {
        return fail(FLAGOS_ERROR_INVALID_HANDLE, "event_elapsed_time: the %s event was never recorded", which);
      }
    }
    FLAGOS_KIT_TRY(intercept(Op::kEventElapsedTime));
    FLAGOS_KIT_TRY(activate(a->device.load(std::memory_order_acquire)));
    float v = 0.0f;
    FLAGOS_KIT_TRY(V::event_elapsed_time(&v, *a, *b));
    *ms = v;
    return FLAGOS_SUCCESS;
  }

  static flagos_hal_table_t make_table() {
    flagos_hal_table_t t;
    std::memset(&t, 0, sizeof t);
    t.abi_version = FLAGOS_HAL_ABI_VERSION;
    t.struct_size = static_cast<uint32_t>(sizeof t);
    t.get_name = detail::Guarded<&get_name>::call;
    t.get_version = detail::Guarded<&get_version>::call;
    t.get_error_string = detail::Guarded<&get_error_string>::call;
    t.get_last_error_message = detail::Guarded<&get_last_error_message>::call;
    t.get_native_device = detail::Guarded<&get_native_device>::call;
    t.get_device_count = detail::Guarded<&get_device_count>::call;
    t.get_device = detail::Guarded<&get_device>::call;
    t.set_device = detail::Guarded<&set_device>::call;
    t.get_device_properties = detail::Guarded<&get_device_properties>::call;
    t.device_synchronize = detail::Guarded<&device_synchronize>::call;
    t.mem_get_info = detail::Guarded<&mem_get_info>::call;
    t.malloc = detail::Guarded<&dev_malloc>::call;
    t.free = detail::Guarded<&dev_free>::call;
    t.host_malloc = detail::Guarded<&host_malloc>::call;
    t.host_free = detail::Guarded<&host_free>::call;
    t.memcpy = detail::Guarded<&copy>::call;
    t.memcpy_async = detail::Guarded<&copy_async>::call;
    t.memset = detail::Guarded<&fill>::call;
    t.memset_async = detail::Guarded<&fill_async>::call;
    t.pointer_get_attributes = detail::Guarded<&pointer_get_attributes>::call;
    t.stream_create = detail::Guarded<&stream_create>::call;
    t.stream_get_priority_range = detail::Guarded<&stream_get_priority_range>::call;
    t.stream_get_default = detail::Guarded<&stream_get_default>::call;
    t.stream_destroy = detail::Guarded<&stream_destroy>::call;
    t.stream_query = detail::Guarded<&stream_query>::call;
    t.stream_synchronize = detail::Guarded<&stream_synchronize>::call;
    t.stream_wait_event = detail::Guarded<&stream_wait_event>::call;
    t.stream_get_device = detail::Guarded<&stream_get_device>::call;
    t.stream_get_native_handle = detail::Guarded<&stream_get_native_handle>::call;
    t.event_create = detail::Guarded<&event_create>::call;
    t.event_destroy = detail::Guarded<&event_destroy>::call;
    t.event_record = detail::Guarded<&event_record>::call;
    t.event_query = detail::Guarded<&event_query>::call;
    t.event_synchronize = detail::Guarded<&event_synchronize>::call;
    t.event_elapsed_time = detail::Guarded<&event_elapsed_time>::call;
    if constexpr (detail::HasGraph<V>::value) {  // the optional graph runtime (graph.hpp)
      using G = GraphRuntime<V, Hal<V>>;
      t.graph_get_formats = detail::Guarded<&G::get_formats>::call;
      t.graph_load = detail::Guarded<&G::load>::call;
      t.graph_get_info = detail::Guarded<&G::get_info>::call;
      t.graph_get_tensor_info = detail::Guarded<&G::get_tensor_info>::call;
      t.graph_execute = detail::Guarded<&G::execute>::call;
      t.graph_destroy = detail::Guarded<&G::destroy>::call;
    }
    if constexpr (detail::HasKernels<V>::value) {  // the optional kernel extension (kernels.hpp)
      using K = KernelRuntime<V, Hal<V>>;
      t.kernel_get_formats = detail::Guarded<&K::get_formats>::call;
      t.kernel_get_target = detail::Guarded<&K::get_target>::call;
      t.module_load = detail::Guarded<&K::load>::call;
      t.module_get_function = detail::Guarded<&K::get_function>::call;
      t.function_set_shared_memory = detail::Guarded<&K::set_shared_memory>::call;
      t.launch_kernel = detail::Guarded<&K::launch>::call;
      t.module_unload = detail::Guarded<&K::unload>::call;
      if constexpr (detail::HasTensorDescriptors<V>::value) {  // ABI 1.5
        t.kernel_encode_tensor_descriptor = detail::Guarded<&K::encode_tensor_descriptor>::call;
      }
    }
    if constexpr (detail::HasCapture<V>::value) {  // the optional stream capture (capture.hpp)
      using C = CaptureRuntime<V, Hal<V>>;
      t.stream_begin_capture = detail::Guarded<&C::begin>::call;
      t.stream_end_capture = detail::Guarded<&C::end>::call;
      t.stream_is_capturing = detail::Guarded<&C::is_capturing>::call;
      t.capture_instantiate = detail::Guarded<&C::instantiate>::call;
      t.capture_destroy = detail::Guarded<&C::destroy_capture>::call;
      t.replay_launch = detail::Guarded<&C::launch>::call;
      t.replay_destroy = detail::Guarded<&C::destroy_replay>::call;
    }
    if constexpr (detail::HasHostTasks<V>::value) {  // the optional host tasks (ABI 1.4)
      t.stream_launch_host_task = detail::Guarded<&stream_launch_host_task>::call;
    }
    return t;
  }

 public:
  // flagos_hal_kit_test_control of this HAL (see FLAGOS_HAL_KIT_ENTRY, test_control.h).
  static const flagos_hal_test_control_t* test_control() {
    static const flagos_hal_test_control_t control = {
        sizeof(flagos_hal_test_control_t), detail::Guarded<&control_arm>::call,
        detail::Guarded<&control_calls>::call, faults().kind_list(),
        detail::Guarded<&control_live>::call};
    return &control;
  }

 private:
  static Status control_arm(const char* spec) { return faults().arm(spec); }
  static Status control_calls(const char* kind, uint64_t* count) { return faults().calls(kind, count); }
  static Status control_live(uint64_t* streams, uint64_t* events) {
    if (!streams || !events) return fail(FLAGOS_ERROR_INVALID_VALUE, "live: NULL output");
    *streams = state().live_streams.load();
    *events = state().live_events.load();
    return FLAGOS_SUCCESS;
  }

 public:
  // flagos_hal_get_table of this HAL (see FLAGOS_HAL_KIT_ENTRY).
  static Status get_table(uint32_t abi_major, const flagos_hal_table_t** out) {
    if (!out) return null_arg("flagos_hal_get_table", "out");
    if (abi_major != FLAGOS_HAL_ABI_MAJOR) {
      return fail(FLAGOS_ERROR_VERSION_MISMATCH,
                  "flagos_hal_get_table: this HAL serves ABI major %u, asked for %u",
                  FLAGOS_HAL_ABI_MAJOR, abi_major);
    }
    *out = table();
    return FLAGOS_SUCCESS;
  }
};

}  // namespace kit
}  // namespace flagos_hal

// Defines the exported symbols for vendor class VENDOR: flagos_hal_get_table (the ABI)
// and flagos_hal_kit_test_control (test_control.h). Put it in exactly one source file of
// the HAL.
#define FLAGOS_HAL_KIT_ENTRY(VENDOR)                                                     \
  extern "C" FLAGOS_HAL_EXPORT flagos_status_t flagos_hal_get_table(                     \
      uint32_t abi_major, const flagos_hal_table_t** out) {                              \
    return ::flagos_hal::kit::Hal<VENDOR>::get_table(abi_major, out);                    \
  }                                                                                      \
  extern "C" FLAGOS_HAL_EXPORT const flagos_hal_test_control_t* flagos_hal_kit_test_control() { \
    return ::flagos_hal::kit::Hal<VENDOR>::test_control();                               \
  }

// The simulated device, built on the flagos HAL kit (flagos_hal/kit/kit.hpp): the kit does
// the ABI's checks, registries, errors and table; these files are the device itself.
//   device.cpp  configuration (FLAGOS_SIM_*), fault injection, identity, devices, the entry
//   memory.cpp  an arena of host memory per device with a best-fit allocator
//   stream.cpp  streams as worker threads, events as markers in their queues
//   graph.cpp   the graph runtime: loads plans (plan.hpp) and runs them on a stream
//   kernels.cpp the kernel extension: host libraries of C kernels, run on a stream
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "flagos_hal/kit/kit.hpp"
#include "flagos_hal/sim_runtime.h"
#include "plan.hpp"

namespace flagos_sim {

namespace kit = flagos_hal::kit;
using kit::Status;

// ---- configuration and the test control (device.cpp) -----------------------------
struct Config {
  int devices = 2;                    // FLAGOS_SIM_DEVICES
  size_t capacity = size_t(4) << 30;  // FLAGOS_SIM_MEMORY, bytes per device
};
const Config& config();
// The test control every runtime stream carries (sim_runtime.h): the kit's.
const flagos_hal_sim_control_t* test_control();

// ---- streams and events (stream.cpp) ----------------------------------------------
using Task = std::function<void()>;
using Clock = std::chrono::steady_clock;

// The work an event captured at one record; completes when its stream reaches it.
struct SimStream;

struct Capture {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  const SimStream* stream = nullptr;  // the stream whose queue completes it
  Clock::time_point when;
  void complete();
  bool is_done();
  void wait();
};

struct SimStream : kit::StreamBase {
  std::mutex mu;
  std::condition_variable has_work, idle;
  std::deque<Task> queue;
  // Queued or running. Changed under `mu`; read without it where the answer alone is
  // enough (an idle stream's synchronize is on every host access of the memory).
  std::atomic<size_t> pending{0};
  bool stopping = false;
  std::thread worker;
  // While the stream captures (capture.cpp), push records here instead of queueing.
  std::vector<Task> recording;
  // The native handle: what kernel libraries for this device launch on (sim_runtime.h).
  flagos_hal_sim_stream_t runtime{};

  ~SimStream();  // stops the worker if stream_destroy did not (a failed create)
  void run();
  void push(Task task);
  bool is_idle() { return pending.load(std::memory_order_acquire) == 0; }
  // Whether the caller is this stream's worker (inside work queued on the stream).
  bool on_worker() const { return worker.get_id() == std::this_thread::get_id(); }
  // The stream whose worker the calling thread is; nullptr on any other thread.
  static const SimStream* current();
  void synchronize();
  void stop();  // after the queue has drained
};

struct SimEvent : kit::EventBase {
  std::mutex mu;
  std::shared_ptr<Capture> last;  // the capture of the last record
  std::shared_ptr<Capture> capture();
};

// ---- graphs (graph.cpp) -------------------------------------------------------------
// A loaded plan with its constants in device memory; shared by the graph and its queued
// executions, so destroying the graph while they are pending is safe.
struct LoadedPlan {
  plan::Plan plan;
  int device = 0;
  void* constants = nullptr;
  size_t constant_bytes = 0;
  ~LoadedPlan();
};
struct SimGraph : kit::GraphBase {
  std::shared_ptr<const LoadedPlan> loaded;
};

// ---- kernels (kernels.cpp) ------------------------------------------------------------
// A loaded image; shared by its module, its functions and their queued launches, so that
// unloading the module while launches are pending is safe.
struct KernelLibrary {
  void* handle = nullptr;
  // The image's anonymous file, open while the library is loaded: dlopen knows a library
  // by its path (/proc/self/fd/N), so no other image may get that path meanwhile.
  int fd = -1;
  const flagos_hal_sim_kernel_t* kernels = nullptr;
  ~KernelLibrary();
};
struct SimModule : kit::ModuleBase {
  std::shared_ptr<KernelLibrary> lib;
};
struct SimFunction : kit::FunctionBase {
  std::shared_ptr<KernelLibrary> lib;
  const flagos_hal_sim_kernel_t* kernel = nullptr;
};

// ---- stream capture (capture.cpp) -----------------------------------------------------
// The tasks a capturing stream was given, in order; each replay launch queues a copy, so
// destroying the replay while launches are pending is safe.
struct SimCapturedWork : kit::CapturedWorkBase {
  std::vector<Task> tasks;
};
struct SimReplay : kit::ReplayBase {
  std::vector<Task> tasks;
};

// ---- the vendor class the kit calls ------------------------------------------------
struct Sim : kit::VendorDefaults {
  static constexpr const char* kName = "sim";
  static constexpr flagos_native_device_t kNativeDevice = FLAGOS_NATIVE_CPU;
  static constexpr bool kCheckRanges = true;  // a real device faults on stray pointers
  static constexpr bool kSyncWaitsForDefaultStream = true;
  using Stream = SimStream;
  using Event = SimEvent;
  using Graph = SimGraph;
  using Module = SimModule;
  using Function = SimFunction;
  using CapturedWork = SimCapturedWork;
  using Replay = SimReplay;

  FLAGOS_HAL_KIT_RUNTIME_CALLS()
  // the graph runtime (kit/graph.hpp)
  static const char* graph_formats();
  static Status graph_load(Graph& g, const char* format, const void* artifact, size_t size);
  static Status graph_execute(Graph& g, const void* const* inputs, void* const* outputs, void* workspace,
                              Stream& stream);
  static Status graph_destroy(Graph& g);
  FLAGOS_HAL_KIT_KERNEL_CALLS()  // the kernel extension (kit/kernels.hpp; kernels.cpp)
  // tensor descriptors (ABI 1.5; kernels.cpp): flagos_hal_sim_tensor_descriptor_t
  static Status kernel_encode_tensor_descriptor(int device, const flagos_tensor_descriptor_info_t& info,
                                                void* out, size_t* size);
  FLAGOS_HAL_KIT_CAPTURE_CALLS()  // the stream capture (kit/capture.hpp; capture.cpp)
  // host tasks (ABI 1.4; stream.cpp): fn(data) on the stream's worker, recorded while it
  // captures; the data released with the last copy of the task
  static Status stream_launch_host_task(Stream& s, void (*fn)(void*), void* data,
                                        void (*release)(void*));
};

}  // namespace flagos_sim

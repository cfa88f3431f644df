#include "capture/stream_graph.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <fstream>

#include "capture/capture_state.h"
#include "capture/twin_allocator_hooks.h"
#include "runtime/allocator.h"
#include "runtime/hal.h"
#include "runtime/hal_raise.h"
#include "runtime/stream.h"

#if __has_include(<ATen/core/GraphImplInterface.h>)
#include <ATen/core/GraphImplInterface.h>
#define FLAGOS_HAS_GRAPH_IMPL 1
#endif

namespace flagos {
namespace {

std::atomic<c10::CaptureId_t> g_next_pool_id{1};

bool hal_captures(const flagos_hal_table_t& t) {
  return FLAGOS_HAL_HAS(&t, stream_begin_capture) && FLAGOS_HAL_HAS(&t, stream_end_capture) &&
         FLAGOS_HAL_HAS(&t, stream_is_capturing) && FLAGOS_HAL_HAS(&t, capture_instantiate) &&
         FLAGOS_HAL_HAS(&t, capture_destroy) && FLAGOS_HAL_HAS(&t, replay_launch) &&
         FLAGOS_HAL_HAS(&t, replay_destroy);
}

}  // namespace

c10::MempoolId_t graph_pool_handle() { return {0, g_next_pool_id.fetch_add(1)}; }

StreamGraph::StreamGraph(bool keep_graph) : keep_graph_(keep_graph) {}

StreamGraph::~StreamGraph() {
  try {
    reset();
  } catch (const std::exception& e) {
    TORCH_WARN("flagos: releasing a graph failed: ", e.what());
  }
}

const flagos_hal_table_t& StreamGraph::hal() const { return hal_of(device_); }

void StreamGraph::capture_begin(c10::MempoolId_t pool, const std::string& mode) {
  TORCH_CHECK(!capture_stream_, "flagos: this graph is capturing already");
  TORCH_CHECK(!captured_, "flagos: this graph holds a capture; call reset() before capturing "
              "again");
  TORCH_CHECK(mode == "default" || mode == "global" || mode == "thread_local" || mode == "relaxed",
              "flagos: unknown capture_error_mode '", mode,
              "' (default, global, thread_local or relaxed)");
  c10::DeviceIndex device = current_device();
  const auto& d = hal_device(device);
  TORCH_CHECK(hal_captures(*d.lib->table), "flagos: flagos:", int(device), "'s HAL '",
              d.lib->name, "' cannot capture streams (it has no stream capture functions, "
              "flagos_hal.h ABI 1.3); graphs need a HAL that records a stream's work");
  c10::Stream stream = current_stream(device);
  TORCH_CHECK(stream.id() != 0, "flagos: a graph cannot capture the default stream of flagos:",
              int(device), "; capture on a stream of your own: "
              "with torch.flagos.stream(torch.flagos.Stream()): ... (torch.flagos.graph does this)");
  device_ = device;
  c10::MempoolId_t id = pool.first == 0 && pool.second == 0
                            ? c10::MempoolId_t{g_next_pool_id.fetch_add(1), 0} : pool;
  begin_allocate_to_pool(device, id, stream.id());
  pool_ = id;
  holds_pool_ = true;
  try {
    capture::twin_begin_allocate(device, id);
  } catch (...) {
    end_allocate_to_pool(device, id, stream.id());
    holds_pool_ = false;
    release_pool(device, id);
    throw;
  }
  flagos_status_t st = hal().stream_begin_capture(hal_stream(stream));
  if (st != FLAGOS_SUCCESS) {
    end_allocate_to_pool(device, id, stream.id());
    capture::twin_end_allocate(device, id);
    capture::twin_release(device, id);
    holds_pool_ = false;
    release_pool(device, id);
    FLAGOS_HAL_RAISE(hal(), st, "stream_begin_capture");
  }
  capture::begin(stream);
  capture_stream_ = stream;
}

void StreamGraph::capture_end() {
  TORCH_CHECK(capture_stream_, "flagos: capture_end without capture_begin");
  TORCH_CHECK(current_stream(device_) == *capture_stream_,
              "flagos: capture_end on another stream than the one capture_begin captured; "
              "end the capture with the capturing stream current");
  c10::Stream stream = *capture_stream_;
  capture_stream_.reset();
  capture::end(stream);
  host_inputs_ = capture::take_kept(stream);
  end_allocate_to_pool(device_, pool_, stream.id());
  flagos_capture_t captured = nullptr;
  flagos_status_t st = hal().stream_end_capture(hal_stream(stream), &captured);
  if (st == FLAGOS_SUCCESS) {
    capture_ = captured;
    captured_ = true;
  }
  // After the HAL's end, so that a hook that raises leaves no stream capturing (the graph
  // holds what it captured; reset() releases it).
  capture::twin_end_allocate(device_, pool_);
  if (st != FLAGOS_SUCCESS) FLAGOS_HAL_RAISE(hal(), st, "stream_end_capture");
  if (!keep_graph_) {
    instantiate();
    if (!debug_) {
      hal().capture_destroy(capture_);
      capture_ = nullptr;
    }
  }
}

void StreamGraph::instantiate() {
  TORCH_CHECK(captured_, "flagos: instantiate needs a graph captured since the last reset");
  if (replay_) return;
  TORCH_CHECK(capture_, "flagos: this graph's capture was released after instantiation");
  flagos_replay_t replay = nullptr;
  flagos_status_t st = hal().capture_instantiate(capture_, &replay);
  if (st != FLAGOS_SUCCESS) FLAGOS_HAL_RAISE(hal(), st, "capture_instantiate");
  replay_ = replay;
}

void StreamGraph::replay() {
  TORCH_CHECK(captured_, "flagos: replay needs a graph captured since the last reset");
  if (!replay_) instantiate();
  flagos_status_t st = hal().replay_launch(replay_, hal_stream(current_stream(device_)));
  if (st != FLAGOS_SUCCESS) FLAGOS_HAL_RAISE(hal(), st, "replay_launch");
}

void StreamGraph::reset() {
  if (capture_stream_) {
    // Reset while capturing (an exception inside the capture): stop recording, drop it.
    c10::Stream stream = *capture_stream_;
    capture_stream_.reset();
    capture::end(stream);
    capture::take_kept(stream);
    end_allocate_to_pool(device_, pool_, stream.id());
    flagos_capture_t captured = nullptr;
    if (hal().stream_end_capture(hal_stream(stream), &captured) == FLAGOS_SUCCESS && captured) {
      hal().capture_destroy(captured);
    }
    try {
      capture::twin_end_allocate(device_, pool_);
    } catch (const std::exception& e) {  // reset runs on failure paths: finish releasing
      TORCH_WARN("flagos: ending the twin allocator's graph pool failed: ", e.what());
    }
  }
  if (replay_) hal().replay_destroy(replay_);
  if (capture_) hal().capture_destroy(capture_);
  replay_ = nullptr;
  capture_ = nullptr;
  captured_ = false;
  if (!host_inputs_.empty()) {  // a queued replay may still read them
    hal().device_synchronize(hal_device(device_).local_index);
    host_inputs_.clear();
  }
  if (holds_pool_) {
    holds_pool_ = false;
    release_pool(device_, pool_);
    capture::twin_release(device_, pool_);  // a raise here leaves nothing of this graph held
  }
}

c10::MempoolId_t StreamGraph::pool() const {
  TORCH_CHECK(holds_pool_, "flagos: this graph has no pool before capture_begin");
  return pool_;
}

void StreamGraph::enable_debug_mode() { debug_ = true; }

void StreamGraph::debug_dump(const std::string& path) {
  TORCH_CHECK(debug_, "flagos: call enable_debug_mode() before capturing to dump a graph");
  TORCH_CHECK(captured_, "flagos: debug_dump needs a captured graph");
  // The HAL ABI has no way to describe a capture's work items; what flagos knows is written.
  std::ofstream out(path);
  TORCH_CHECK(out, "flagos: cannot write ", path);
  const auto& d = hal_device(device_);
  out << "flagos stream graph\ndevice: flagos:" << int(device_) << "\nhal: " << d.lib->name
      << "\npool: (" << pool_.first << ", " << pool_.second << ")\ninstantiated: "
      << (replay_ ? "yes" : "no") << "\n";
}

#ifdef FLAGOS_HAS_GRAPH_IMPL
namespace {
class TorchGraphImpl final : public at::GraphImplInterface {
 public:
  explicit TorchGraphImpl(const at::GraphImplArgs& args) : graph_(args.keep_graph) {}
  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) override {
    static const char* names[] = {"default", "global", "thread_local", "relaxed"};
    graph_.capture_begin(pool, names[static_cast<int>(mode) & 3]);
  }
  void capture_end() override { graph_.capture_end(); }
  void instantiate() override { graph_.instantiate(); }
  void replay() override { graph_.replay(); }
  void reset() override { graph_.reset(); }
  c10::MempoolId_t pool() const override { return graph_.pool(); }
  void enable_debug_mode() override { graph_.enable_debug_mode(); }
  void debug_dump(const std::string& path) override { graph_.debug_dump(path); }

 private:
  StreamGraph graph_;
};
}  // namespace

bool register_with_torch() {
  auto key = c10::DeviceTypeName(c10::DeviceType::PrivateUse1, /*lower_case=*/false);
  if (at::GraphImplRegistry()->Has(key)) return true;
  at::GraphImplRegistry()->Register(key, [](at::GraphImplArgs args) {
    return std::unique_ptr<at::GraphImplInterface>(new TorchGraphImpl(args));
  });
  return true;
}
#else
bool register_with_torch() { return false; }
#endif

}  // namespace flagos

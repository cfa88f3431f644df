// A graph of one flagos stream's work: captured once through the HAL's stream capture
// (flagos_hal.h ABI 1.3), replayed many times. What torch.flagos.Graph is, and what
// torch.accelerator.Graph creates for flagos where torch has the device-generic graph
// interface (ATen/core/GraphImplInterface.h). Not the offload graph runtime (csrc/graph/).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

#include <optional>
#include <string>
#include <vector>

#include "flagos_hal/flagos_hal.h"

namespace flagos {

class StreamGraph {
 public:
  // keep_graph: keep the capture after capture_end, instantiated by instantiate() or the
  // first replay (as torch.cuda.CUDAGraph's keep_graph).
  explicit StreamGraph(bool keep_graph = false);
  ~StreamGraph();
  StreamGraph(const StreamGraph&) = delete;
  StreamGraph& operator=(const StreamGraph&) = delete;

  // Starts recording the current stream of the current device, which must be a stream
  // the caller created (not the default stream). `pool` {0, 0}: a pool of its own;
  // another graph's pool() or graph_pool_handle(): share that pool. `mode` is torch's
  // capture mode name; flagos checks only the capturing stream whatever it is.
  void capture_begin(c10::MempoolId_t pool = {0, 0}, const std::string& mode = "default");
  void capture_end();
  void instantiate();
  // Queues the recorded work on the current stream of the device it was captured on.
  void replay();
  // Drops the capture and the replay, and this graph's use of its pool.
  void reset();
  c10::MempoolId_t pool() const;
  void enable_debug_mode();
  void debug_dump(const std::string& path);

 private:
  const flagos_hal_table_t& hal() const;

  bool keep_graph_;
  bool debug_ = false;
  c10::DeviceIndex device_ = -1;
  std::optional<c10::Stream> capture_stream_;  // set while capturing
  c10::MempoolId_t pool_{0, 0};
  bool holds_pool_ = false;
  flagos_capture_t capture_ = nullptr;
  flagos_replay_t replay_ = nullptr;
  bool captured_ = false;  // a capture ended successfully since the last reset
  std::vector<c10::DataPtr> host_inputs_;  // pinned memory recorded copies read (constants)
};

// A fresh pool id, as torch.cuda.graph_pool_handle() gives one.
c10::MempoolId_t graph_pool_handle();

// Registers StreamGraph as torch's graph implementation for flagos where torch has the
// device-generic interface; false where it does not. Call after the device is renamed.
bool register_with_torch();

}  // namespace flagos

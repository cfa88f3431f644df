// ProcessGroupFlagOS: a c10d::Backend for flagos tensors that delegates every collective to
// a communication library's own c10d backend (Gloo, or NCCL when the HAL's memory is
// CUDA memory), handing it views over the same device memory (zero-copy), or host
// buffers the data is staged through when the memory is not addressable from the host.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flagos_dist {

// How a flagos tensor reaches the delegate.
enum class Path : uint8_t {
  kHostZeroCopy,  // Gloo on CPU views over host-addressable device memory (sim)
  kHostStaged,    // Gloo on pinned host copies of the device memory
  kCuda,          // NCCL on CUDA views over CUDA device memory, on the flagos stream
};

struct Config {
  std::string delegate;                   // "gloo" or "nccl": the library the work goes to
  Path path = Path::kHostZeroCopy;
  bool check = true;                      // cross-rank metadata check before each collective
  std::chrono::milliseconds timeout{kBackendDefaultTimeout};
  std::vector<int> native_index;          // per flagos device: CUDA ordinal (kCuda path)
};

// One collective in flight: the flagos tensors it reads and writes, and what must happen
// on the host once the delegate has finished (AVG division, staged copies back).
struct Plan {
  c10d::OpType op = c10d::OpType::UNKNOWN;
  std::string name;
  uint64_t seq = 0;
  std::optional<c10::DeviceIndex> device;  // the flagos device of the tensors
  bool synced = false;                     // the flagos stream has been drained (host paths)
  std::chrono::milliseconds timeout{0};
  std::vector<at::Tensor> keep;            // flagos tensors kept alive until completion
  std::vector<at::Tensor> result;          // the future's value (flagos tensors)
  std::vector<at::Tensor> divide;          // host views divided by the world size (AVG)
  std::vector<std::pair<at::Tensor, at::Tensor>> post_copy;  // dst.copy_(src), in order
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;  // staged: flagos.copy_(host)
};

using Fingerprint = std::array<int64_t, 16>;

class ProcessGroupFlagOS : public c10d::Backend {
 public:
  ProcessGroupFlagOS(int rank, int size, c10::intrusive_ptr<c10d::Backend> inner,
                     c10::intrusive_ptr<c10d::Backend> checker, Config config);
  ~ProcessGroupFlagOS() override;

  const std::string getBackendName() const override { return "flagos"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  bool supportsCoalescing() const override { return config_.path == Path::kCuda; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  // Lifecycle calls reach the delegates: destroy_process_group() shuts the group down
  // (an inner NCCL backend frees its communicators and stops its watchdog), and abort()
  // aborts their pending work.
  void shutdown() override;
  void abort() override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  const Config& config() const { return config_; }
  const c10::intrusive_ptr<c10d::Backend>& inner() const { return inner_; }
  void setMetadataCheck(bool on) { config_.check = on; }
  uint64_t checksRun() const { return checks_.load(); }

 private:
  Plan plan(c10d::OpType op, const char* name, std::chrono::milliseconds timeout);
  // The delegate's view of a flagos tensor (CPU tensors pass through). `read`: its data
  // is an input; `write`: the collective writes it.
  at::Tensor native(const at::Tensor& t, Plan& p, bool read, bool write);
  std::vector<at::Tensor> natives(const std::vector<at::Tensor>& ts, Plan& p, bool read,
                                  bool write);
  std::vector<std::vector<at::Tensor>> natives(const std::vector<std::vector<at::Tensor>>& ts,
                                               Plan& p, bool read, bool write);
  // Rewrites AVG / PREMUL_SUM for delegates that lack them (Gloo): scales the inputs or
  // schedules the division of `outputs`; returns the op the delegate runs.
  c10d::ReduceOp reduceOpFor(const c10d::ReduceOp& op, std::vector<at::Tensor>& inputs,
                             bool inputs_are_outputs, const std::vector<at::Tensor>& outputs,
                             Plan& p, bool divide_here = true);
  void checkMetadata(const Plan& p, const Fingerprint& fp);
  // all_to_all for an inner backend without the list form: through alltoall_base (waits).
  c10::intrusive_ptr<c10d::Work> alltoall_through_base(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts);
  c10::intrusive_ptr<c10d::Work> launch(
      Plan p, const std::function<std::vector<c10::intrusive_ptr<c10d::Work>>()>& fn);

  c10::intrusive_ptr<c10d::Backend> inner_;
  c10::intrusive_ptr<c10d::Backend> checker_;
  Config config_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> checks_{0};
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;  // host paths: works to combine
  std::vector<at::Tensor> coalesced_keep_;                 // CUDA path: tensors to keep alive
};

}  // namespace flagos_dist

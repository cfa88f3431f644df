// The CUDA side of device results (csrc/engines/twin/device_results.h): an allocator that wraps
// torch's CUDA caching allocator. Every call is forwarded to the wrapped allocator, except
// allocate() inside a DeviceResultsOnFlagos scope on its twin device, which takes flagos
// memory. It registers itself as CUDA's device-results installer; built only against a
// torch with CUDA, and only where this file compiles against that torch's CUDAAllocator
// interface (CMakeLists.txt checks). The interface grows from release to release: each
// member newer than 2.9 is forwarded from the release that added it (FLAGOS_TORCH_SINCE).
//
// Only allocations on the scope's twin stream are served: a kernel's temporaries on a side
// stream (which it may order with recordStream) stay CUDA memory. Where torch itself
// allocates outside c10::cuda::CUDACachingAllocator::get() (the c10::GetAllocator(kCUDA)
// registry: out= aliases' storages), results stay CUDA memory and are copied, as without
// this allocator. recordStream of a flagos block is forwarded, and the caching allocator
// skips blocks it does not own: such a block is ordered by the flagos stream it was
// allocated on, the stream its kernel ran on.
//
// A wrapper must forward every virtual of the interface: one it missed would silently take
// the base class's default for all CUDA work in the process (a no-op markCaptureBegin, for
// one). A missing pure virtual fails to compile, a missing defaulted one would not, so the
// wrapper is built only for the torch releases whose interface it was checked against.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/version.h>

#include "engines/twin/device_results.h"

// The releases whose interface tools/check_cuda_allocator.py found forwarded in full (it
// preprocesses this file against any release, defining the macro to pass this check).
#if !(TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9 && TORCH_VERSION_MINOR <= 14) && \
    !defined(FLAGOS_CUDA_ALLOCATOR_INTERFACE_CHECK)
#error "the CUDA results allocator was checked against the CUDAAllocator interface of torch 2.9 to 2.14 only"
#endif
#define FLAGOS_TORCH_SINCE(minor) (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= (minor))

namespace flagos {
namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

class CudaResultsAllocator final : public cca::CUDAAllocator {
 public:
  explicit CudaResultsAllocator(cca::CUDAAllocator* next) : next_(next) {}

  c10::DataPtr allocate(size_t n) override {
    const DeviceResultsScope* scope = active_device_results();  // nullptr: native work
    if (scope == nullptr || n == 0 || scope->twin.type() != c10::DeviceType::CUDA ||
        c10::cuda::current_device() != scope->twin.index() ||
        c10::cuda::getCurrentCUDAStream(scope->twin.index()).id() != scope->stream) {
      return next_->allocate(n);
    }
    if (c10::DataPtr dp = allocate_device_result(*scope, n, /*may_free_cached=*/false)) {
      return dp;
    }
    try {
      return next_->allocate(n);
    } catch (const c10::OutOfMemoryError&) {
      // flagos' cached blocks may hold the memory CUDA could not get: free them and take
      // flagos memory (flagos' own out-of-memory error, with its numbers, if still short).
      return allocate_device_result(*scope, n, /*may_free_cached=*/true);
    }
  }
  c10::DeleterFnPtr raw_deleter() const override { return next_->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    next_->copy_data(dest, src, count);
  }
  bool is_simple_data_ptr(const c10::DataPtr& data_ptr) const override {
    return next_->is_simple_data_ptr(data_ptr);
  }

  bool initialized() override { return next_->initialized(); }
  void emptyCache(c10::MempoolId_t mempool_id) override { next_->emptyCache(mempool_id); }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    return next_->getDeviceStats(device);
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { next_->resetAccumulatedStats(device); }
  void resetPeakStats(c10::DeviceIndex device) override { next_->resetPeakStats(device); }
#if FLAGOS_TORCH_SINCE(10)
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    return next_->getMemoryInfo(device);
  }
#endif
  void* raw_alloc(size_t nbytes) override { return next_->raw_alloc(nbytes); }
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override {
    return next_->raw_alloc_with_stream(nbytes, stream);
  }
  void raw_delete(void* ptr) override { next_->raw_delete(ptr); }
  void init(int device_count) override { next_->init(device_count); }
  double getMemoryFraction(c10::DeviceIndex device) override { return next_->getMemoryFraction(device); }
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    next_->setMemoryFraction(fraction, device);
  }
#if FLAGOS_TORCH_SINCE(10)
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex device) override {
    return next_->getExpandableSegmentSizes(device);
  }
#endif
  void enable(bool value) override { next_->enable(value); }
  bool isEnabled() const override { return next_->isEnabled(); }
  void cacheInfo(c10::DeviceIndex device, size_t* largest_block) override {
    next_->cacheInfo(device, largest_block);
  }
  void* getBaseAllocation(void* ptr, size_t* size) override { return next_->getBaseAllocation(ptr, size); }
  using cca::CUDAAllocator::recordStream;
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    next_->recordStream(ptr, stream);
  }
#if FLAGOS_TORCH_SINCE(11)
  cca::SnapshotInfo snapshot(c10::MempoolId_t mempool_id, bool include_traces) override {
    return next_->snapshot(mempool_id, include_traces);
  }
#else
  cca::SnapshotInfo snapshot(c10::MempoolId_t mempool_id) override {
    return next_->snapshot(mempool_id);
  }
#endif
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                           std::function<bool(cudaStream_t)> filter) override {
    next_->beginAllocateToPool(device, mempool_id, std::move(filter));
  }
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override {
    next_->endAllocateToPool(device, mempool_id);
  }
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override {
    next_->releasePool(device, mempool_id);
  }
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override {
    return next_->getPoolUseCount(device, mempool_id);
  }
#if FLAGOS_TORCH_SINCE(11)
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                          std::shared_ptr<cca::CUDAAllocator> allocator) override {
    next_->createOrIncrefPool(device, mempool_id, std::move(allocator));
  }
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t mempool_id, bool use_on_oom) override {
    next_->setUseOnOOM(device, mempool_id, use_on_oom);
  }
#else
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                          cca::CUDAAllocator* allocator) override {
    next_->createOrIncrefPool(device, mempool_id, allocator);
  }
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override {
    next_->setUseOnOOM(device, mempool_id);
  }
#endif
#if FLAGOS_TORCH_SINCE(10)
  void setNoSplit(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override {
    next_->setNoSplit(device, mempool_id);
  }
#endif
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected) override {
    return next_->checkPoolLiveAllocations(device, mempool_id, expected);
  }
  cca::ShareableHandle shareIpcHandle(void* ptr) override { return next_->shareIpcHandle(ptr); }
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override {
    return next_->getIpcDevPtr(std::move(handle));
  }
  bool isHistoryEnabled() override { return next_->isHistoryEnabled(); }
#if FLAGOS_TORCH_SINCE(11)
  void recordHistory(bool enabled, cca::CreateContextFn context_recorder,
                     size_t alloc_trace_max_entries, cca::RecordContext when, bool clear_history,
                     const std::vector<std::string>& skip_actions) override {
    next_->recordHistory(enabled, context_recorder, alloc_trace_max_entries, when, clear_history,
                         skip_actions);
  }
#else
  void recordHistory(bool enabled, cca::CreateContextFn context_recorder,
                     size_t alloc_trace_max_entries, cca::RecordContext when,
                     bool clear_history) override {
    next_->recordHistory(enabled, context_recorder, alloc_trace_max_entries, when, clear_history);
  }
#endif
  void recordAnnotation(const std::vector<std::pair<std::string, std::string>>& md) override {
    next_->recordAnnotation(md);
  }
  void pushCompileContext(std::string& md) override { next_->pushCompileContext(md); }
  void popCompileContext() override { next_->popCompileContext(); }
#if FLAGOS_TORCH_SINCE(10)
  void setUserMetadata(const std::string& metadata) override { next_->setUserMetadata(metadata); }
  std::string getUserMetadata() override { return next_->getUserMetadata(); }
#endif
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override {
    next_->attachOutOfMemoryObserver(std::move(observer));
  }
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker tracker) override {
    next_->attachAllocatorTraceTracker(std::move(tracker));
  }
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override {
    next_->enablePeerAccess(dev, dev_to_access);
  }
  cudaError_t memcpyAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                          cudaStream_t stream, bool p2p_enabled) override {
    return next_->memcpyAsync(dst, dst_device, src, src_device, count, stream, p2p_enabled);
  }
  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                          c10::MempoolId_t id) override {
    return next_->getCheckpointState(device, id);
  }
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<cca::AllocatorState> pps) override {
    return next_->setCheckpointPoolState(device, std::move(pps));
  }
  std::string name() override { return next_->name(); }
#if FLAGOS_TORCH_SINCE(12)
  std::shared_ptr<c10::GatheredContext> getContextForPointer(const void* ptr) override {
    return next_->getContextForPointer(ptr);
  }
  void attachOomRejectionObserver(cca::OomRejectionObserver observer) override {
    next_->attachOomRejectionObserver(std::move(observer));
  }
#endif
#if FLAGOS_TORCH_SINCE(13)
  void markCaptureBegin(c10::DeviceIndex device) override { next_->markCaptureBegin(device); }
  void markCaptureEnd(c10::DeviceIndex device) override { next_->markCaptureEnd(device); }
  c10::DataPtr allocateWithAddress(size_t size, void* addr) override {
    return next_->allocateWithAddress(size, addr);
  }
#endif
#if FLAGOS_TORCH_SINCE(14)
  bool supportsUserMetadata() override { return next_->supportsUserMetadata(); }
  void annotateMemory(const void* ptr, const std::string& metadata) override {
    next_->annotateMemory(ptr, metadata);
  }
#endif

 private:
  cca::CUDAAllocator* next_;
};

bool install() {
  cca::CUDAAllocator* current = cca::get();
  if (current == nullptr) return false;
  // Never freed: torch's CUDA code holds the pointer (tensors' storages keep it) until exit.
  static auto* wrapper = new CudaResultsAllocator(current);
  cca::allocator.store(wrapper);
  return true;
}

// At library load, as CMake builds this file into flagos' core only against a CUDA torch.
[[maybe_unused]] const bool g_registered =
    register_device_results_installer(c10::DeviceType::CUDA, &install);

}  // namespace
}  // namespace flagos

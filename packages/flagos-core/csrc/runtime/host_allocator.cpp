#include "runtime/host_allocator.h"

#include <ATen/core/CachingHostAllocator.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/resize.h"
#include "runtime/stream.h"

namespace flagos {
namespace {

struct PinnedBlock {
  void* ptr;
  size_t size;
  bool in_use = false;
  // Events on the streams of async copies that used the block, with their device.
  std::vector<std::pair<flagos_event_t, c10::DeviceIndex>> events;
};

size_t round_pow2(size_t n) {
  size_t p = 512;
  while (p < n) p <<= 1;
  return p;
}

// Registered as torch's host allocator for flagos (torch.accelerator.empty_host_cache and
// host_memory_stats reach it through at::getHostAllocator).
class PinnedAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &noop, c10::Device(c10::kCPU));
    size_t size = round_pow2(n);
    std::lock_guard<std::mutex> lock(mutex_);
    PinnedBlock* block = nullptr;
    auto range = free_.equal_range(size);
    for (auto it = range.first; it != range.second; ++it) {
      if (ready(it->second)) {
        block = it->second;
        free_.erase(it);
        break;
      }
    }
    if (!block) {
      const auto& hal = host_hal();
      void* ptr = nullptr;
      FLAGOS_HAL_CHECK(hal, hal.host_malloc(size, &ptr));
      block = new PinnedBlock{ptr, size};
      blocks_[ptr] = block;
      stats_.num_host_alloc++;
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(size);
    }
    block->in_use = true;
    stats_.active_requests.increase(1);
    stats_.active_bytes.increase(block->size);
    return c10::DataPtr(block->ptr, block, &release, c10::Device(c10::kCPU));
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool is_pinned(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(const_cast<void*>(ptr));
    if (it == blocks_.begin()) return false;
    --it;
    auto* b = it->second;
    return ptr >= b->ptr && static_cast<const char*>(ptr) < static_cast<char*>(b->ptr) + b->size;
  }

  void record(const void* ptr, const c10::Stream& stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(const_cast<void*>(ptr));
    if (it == blocks_.begin()) return;
    --it;
    auto* b = it->second;
    if (static_cast<const char*>(ptr) >= static_cast<char*>(b->ptr) + b->size) return;
    const auto& hal = hal_of(stream.device_index());
    flagos_event_t ev = nullptr;
    FLAGOS_HAL_CHECK(hal, hal.event_create(FLAGOS_EVENT_DISABLE_TIMING, &ev));
    FLAGOS_HAL_CHECK(hal, hal.event_record(ev, hal_stream(stream)));
    b->events.emplace_back(ev, stream.device_index());
  }

  bool record_event(void* ptr, void*, c10::Stream stream) override {
    record(ptr, stream);
    return true;
  }

  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* st : {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations,
                     &stats_.allocated_bytes}) {
      st->reset_accumulated();
    }
    stats_.num_host_alloc = 0;
    stats_.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* st : {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations,
                     &stats_.allocated_bytes}) {
      st->reset_peak();
    }
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = free_.begin(); it != free_.end();) {
      PinnedBlock* b = it->second;
      if (!ready(b)) {
        ++it;
        continue;
      }
      host_hal().host_free(b->ptr);
      stats_.num_host_free++;
      stats_.allocations.decrease(1);
      stats_.allocated_bytes.decrease(b->size);
      blocks_.erase(b->ptr);
      delete b;
      it = free_.erase(it);
    }
  }

  static PinnedAllocator& instance() {
    static auto* alloc = new PinnedAllocator();
    return *alloc;
  }

 private:
  // Pinned memory comes from the first loaded HAL; every HAL's copies can use it.
  static const flagos_hal_table_t& host_hal() {
    TORCH_CHECK(!loaded_hals().empty(), "flagos: no HAL loaded, pinned memory is unavailable");
    return *loaded_hals().front().table;
  }

  // Drops completed events; true when no async copy still uses the block.
  static bool ready(PinnedBlock* b) {
    for (auto it = b->events.begin(); it != b->events.end();) {
      const auto& hal = hal_of(it->second);
      if (hal.event_query(it->first) == FLAGOS_ERROR_NOT_READY) return false;
      hal.event_destroy(it->first);
      it = b->events.erase(it);
    }
    return true;
  }

  static void noop(void*) {}
  static void release(void* ctx) {
    if (in_forked_child()) return;  // the parent's pinned block: leak it (its lock may be held)
    auto& self = instance();
    auto* b = static_cast<PinnedBlock*>(ctx);
    std::lock_guard<std::mutex> lock(self.mutex_);
    b->in_use = false;
    self.stats_.active_requests.decrease(1);
    self.stats_.active_bytes.decrease(b->size);
    self.free_.emplace(b->size, b);
  }

  std::mutex mutex_;
  std::map<void*, PinnedBlock*> blocks_;
  std::multimap<size_t, PinnedBlock*> free_;
  at::HostStats stats_;
};

}  // namespace

c10::Allocator* pinned_host_allocator() { return &PinnedAllocator::instance(); }
bool is_pinned_ptr(const void* ptr) { return PinnedAllocator::instance().is_pinned(ptr); }
void record_pinned_use(const void* ptr, const c10::Stream& stream) {
  PinnedAllocator::instance().record(ptr, stream);
}
void empty_pinned_cache() { PinnedAllocator::instance().empty_cache(); }

REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &PinnedAllocator::instance());

}  // namespace flagos

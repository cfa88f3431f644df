// Caching allocator per flagos device, modelled on the semantics of PyTorch's CUDA
// caching allocator: size classes, block splitting and merging, stream-aware reuse
// (record_stream), empty_cache, and out-of-memory that frees the cache, retries once,
// then raises torch.OutOfMemoryError with the numbers.
// Graph capture gets private pools, as CUDA's allocator gives a CUDA graph: while a stream
// captures, its allocations come from segments of the capture's pool, which no other
// allocation takes and which go back to the HAL only once the graphs using the pool are
// gone (a replay writes the same addresses again).
// FLAGOS_ALLOCATOR=passthrough sends every request straight to the HAL (debugging).
#include "runtime/allocator.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "runtime/hal_raise.h"
#include "runtime/resize.h"
#include "runtime/stream.h"

namespace flagos {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = 1 << 20;        // requests up to 1 MiB are "small"
constexpr size_t kSmallBuffer = 2 << 20;      // small requests share 2 MiB segments
constexpr size_t kLargeBuffer = 20 << 20;     // 1-10 MiB requests get 20 MiB segments
constexpr size_t kMinLargeAlloc = 10 << 20;
constexpr size_t kRoundLarge = 2 << 20;

struct PrivatePool;

struct Block {
  c10::DeviceIndex device;
  c10::StreamId stream;
  size_t size;
  void* ptr;
  bool allocated = false;
  bool small;
  size_t requested = 0;
  Block* prev = nullptr;
  Block* next = nullptr;
  std::unordered_set<c10::StreamId> stream_uses;  // streams from record_stream
  int pending_events = 0;
  bool recent = false;  // parked in DevicePool::recent_ (free, kept whole)
  PrivatePool* owner = nullptr;  // the capture pool of its segment; nullptr: the shared pool
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
  }
};

// The free blocks of one graph pool, and how many graphs (or captures) still use it.
struct PrivatePool {
  int use_count = 1;
  std::set<Block*, BlockLess> small, large;
};

size_t round_size(size_t size) {
  if (size < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

inline void stat_update(DeviceStats& s, c10::CachingAllocator::StatArray DeviceStats::*field,
                        bool small, int64_t amount) {
  auto& arr = s.*field;
  Stat& all = arr[static_cast<size_t>(StatType::AGGREGATE)];
  Stat& pool = arr[static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)];
  if (amount >= 0) {
    all.increase(amount);
    pool.increase(amount);
  } else {
    all.decrease(-amount);
    pool.decrease(-amount);
  }
}

class DevicePool {
 public:
  explicit DevicePool(c10::DeviceIndex device) : device_(device) {}

  // `may_fail`: return nullptr instead of freeing the cache and raising out of memory.
  Block* malloc(size_t requested, c10::StreamId stream, bool may_fail = false) {
    std::unique_lock<std::mutex> lock(mutex_);
    // Events recorded before a capture may not be asked about during it (CUDA forbids it).
    if (captures_.empty()) process_events();
    size_t size = round_size(requested);
    bool small = size <= kSmallSize;
    Block key{device_, stream, size, nullptr, false, small};
    key.ptr = nullptr;
    PrivatePool* owner = capture_pool_of(stream);
    auto& pool = owner ? (small ? owner->small : owner->large) : (small ? small_ : large_);
    Block* block = small && !owner ? take_recent(size, stream) : nullptr;
    for (int attempt = 0; !block && attempt < 2; ++attempt) {
      auto it = pool.lower_bound(&key);
      if (it != pool.end() && (*it)->stream == stream) {
        block = *it;
        pool_erase(pool, block);
      } else if (attempt == 0 && n_recent_ > 0 && !owner) {
        flush_recent();  // merged, the parked blocks may make room
      } else {
        break;
      }
    }
    if (!block) block = new_segment(size, small, stream, requested, owner);
    if (!block && may_fail) return nullptr;
    // Freeing the cache waits for the device, which a capture forbids: out of memory now.
    if (!block && !captures_.empty()) raise_oom(requested);
    if (!block) {
      // Free cached segments, wait for deferred frees, and try once more.
      lock.unlock();
      synchronize_device();
      lock.lock();
      release_cached();
      stats_.num_alloc_retries++;
      block = new_segment(size, small, stream, requested, owner);
    }
    if (!block) raise_oom(requested);

    size_t remaining = block->size - size;
    if ((small && remaining >= kMinBlockSize) || (!small && remaining > kSmallSize)) {
      auto* rest = new Block{device_, stream, remaining, nullptr, false, small};
      rest->owner = block->owner;
      rest->ptr = static_cast<char*>(block->ptr) + size;
      rest->prev = block;
      rest->next = block->next;
      if (block->next) block->next->prev = rest;
      block->next = rest;
      block->size = size;
      pool_insert(pool, rest);
    }
    block->allocated = true;
    block->requested = requested;
    stat_update(stats_, &DeviceStats::allocation, small, 1);
    stat_update(stats_, &DeviceStats::allocated_bytes, small, block->size);
    stat_update(stats_, &DeviceStats::active, small, 1);
    stat_update(stats_, &DeviceStats::active_bytes, small, block->size);
    stat_update(stats_, &DeviceStats::requested_bytes, small, requested);
    return block;
  }

  // `block` is the DataPtr context of an allocation; allocated blocks are never merged
  // away, so the pointer stays valid until this call.
  void free(Block* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_INTERNAL_ASSERT(block->allocated, "flagos allocator: freeing a block twice");
    block->allocated = false;
    stat_update(stats_, &DeviceStats::allocation, block->small, -1);
    stat_update(stats_, &DeviceStats::allocated_bytes, block->small, -int64_t(block->size));
    stat_update(stats_, &DeviceStats::requested_bytes, block->small, -int64_t(block->requested));
    if (!block->stream_uses.empty()) {
      if (!captures_.empty()) {
        // No event may be recorded or asked about while a stream captures: the block
        // waits, unused, until the last capture on this device ends.
        deferred_.push_back(block);
        return;
      }
      // The block may still be read by other streams: reuse only after their work so far.
      insert_events(block);
      if (block->pending_events > 0) return;
    }
    if (block->small && !block->owner) {
      park(block);
    } else {
      free_block(block);
    }
  }

  // Pass-through mode: one HAL allocation per request, returned to the HAL on free, still
  // counted (every byte of a flagos tensor is in the statistics, whatever the mode).
  void* malloc_passthrough(size_t requested, bool may_fail = false) {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t size = round_size(requested);
    bool small = size <= kSmallSize;
    const auto& d = hal_device(device_);
    void* ptr = nullptr;
    flagos_status_t st = d.lib->table->malloc(d.local_index, size, &ptr);
    if (st == FLAGOS_ERROR_OUT_OF_MEMORY && may_fail) return nullptr;
    if (st == FLAGOS_ERROR_OUT_OF_MEMORY) {
      // Nothing is cached in this mode, but queued frees may still be pending on the HAL.
      stats_.num_alloc_retries++;
      FLAGOS_HAL_CHECK(*d.lib->table, d.lib->table->device_synchronize(d.local_index));
      st = d.lib->table->malloc(d.local_index, size, &ptr);
      if (st == FLAGOS_ERROR_OUT_OF_MEMORY) raise_oom(requested);
    }
    if (st != FLAGOS_SUCCESS) throw_hal_error(*d.lib->table, st, "malloc", __FILE__, __LINE__);
    passthrough_sizes_[ptr] = {size, requested};
    stats_.num_device_alloc++;
    for (auto field : {&DeviceStats::segment, &DeviceStats::allocation, &DeviceStats::active})
      stat_update(stats_, field, small, 1);
    for (auto field : {&DeviceStats::reserved_bytes, &DeviceStats::allocated_bytes,
                       &DeviceStats::active_bytes})
      stat_update(stats_, field, small, int64_t(size));
    stat_update(stats_, &DeviceStats::requested_bytes, small, int64_t(requested));
    return ptr;
  }

  void free_passthrough(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = passthrough_sizes_.find(ptr);
    TORCH_INTERNAL_ASSERT(it != passthrough_sizes_.end(),
                          "flagos allocator: freeing an unknown pointer");
    auto [size, requested] = it->second;
    passthrough_sizes_.erase(it);
    bool small = size <= kSmallSize;
    const auto& d = hal_device(device_);
    // No stream tracking in this mode: wait for all queued work before the HAL frees.
    d.lib->table->device_synchronize(d.local_index);
    d.lib->table->free(d.local_index, ptr);
    stats_.num_device_free++;
    for (auto field : {&DeviceStats::segment, &DeviceStats::allocation, &DeviceStats::active})
      stat_update(stats_, field, small, -1);
    for (auto field : {&DeviceStats::reserved_bytes, &DeviceStats::allocated_bytes,
                       &DeviceStats::active_bytes})
      stat_update(stats_, field, small, -int64_t(size));
    stat_update(stats_, &DeviceStats::requested_bytes, small, -int64_t(requested));
  }

  void record_stream(Block* block, c10::StreamId stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (block->allocated && stream != block->stream) block->stream_uses.insert(stream);
  }

  void empty_cache() {
    synchronize_device();
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached();
  }

  DeviceStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_stat([](Stat& s) { s.reset_peak(); });
  }

  void reset_accumulated() {
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_stat([](Stat& s) { s.reset_accumulated(); });
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
  }

  // From now on, allocations from `stream` come from graph pool `id` (created on first
  // use; a pool named again gains a user) until end_allocate_to_pool.
  void begin_allocate_to_pool(c10::MempoolId_t id, c10::StreamId stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = private_pools_.find(id);
    if (it == private_pools_.end()) {
      it = private_pools_.emplace(id, std::make_unique<PrivatePool>()).first;
    } else {
      it->second->use_count++;
    }
    captures_.emplace_back(stream, it->second.get());
  }

  void end_allocate_to_pool(c10::MempoolId_t id, c10::StreamId stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto pool = private_pools_.find(id);
    if (pool == private_pools_.end()) return;
    auto it = std::find(captures_.begin(), captures_.end(),
                        std::make_pair(stream, pool->second.get()));
    if (it != captures_.end()) captures_.erase(it);
    if (!captures_.empty()) return;
    for (Block* block : deferred_) {
      insert_events(block);
      if (block->pending_events == 0) free_block(block);
    }
    deferred_.clear();
  }

  // A graph using pool `id` is gone. With its last user, the pool's memory goes back to
  // the HAL: its free segments now, the others once their last tensor is freed and the
  // cache is emptied (empty_cache, or an allocation that needs room).
  void release_pool(c10::MempoolId_t id) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = private_pools_.find(id);
      if (it == private_pools_.end() || --it->second->use_count > 0) return;
      if (!captures_.empty()) return;  // no waiting for the device now; empty_cache frees it
    }
    synchronize_device();  // the pool's replays may still run
    std::lock_guard<std::mutex> lock(mutex_);
    release_free_private_segments();
  }

  void snapshot(std::vector<SegmentSnapshot>& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    flush_recent();  // segments as merged free blocks, as without the parking
    for (Block* head : segments_) {
      SegmentSnapshot seg{device_, reinterpret_cast<uintptr_t>(head->ptr), 0, 0, head->stream, {}};
      for (Block* b = head; b; b = b->next) {
        seg.total_size += b->size;
        if (b->allocated) seg.allocated_size += b->size;
        seg.blocks.emplace_back(b->size, b->allocated);
      }
      out.push_back(std::move(seg));
    }
  }

 private:
  template <typename F>
  void for_each_stat(F f) {
    for (auto field : {&DeviceStats::allocation, &DeviceStats::segment, &DeviceStats::active,
                       &DeviceStats::inactive_split, &DeviceStats::allocated_bytes,
                       &DeviceStats::reserved_bytes, &DeviceStats::active_bytes,
                       &DeviceStats::inactive_split_bytes, &DeviceStats::requested_bytes}) {
      for (auto& s : stats_.*field) f(s);
    }
    f(stats_.oversize_allocations);
    f(stats_.oversize_segments);
  }

  const flagos_hal_table_t& hal() { return hal_of(device_); }

  Block* new_segment(size_t size, bool small, c10::StreamId stream, size_t requested,
                     PrivatePool* owner) {
    size_t bytes = segment_size(size);
    const auto& d = hal_device(device_);
    void* ptr = nullptr;
    flagos_status_t st = d.lib->table->malloc(d.local_index, bytes, &ptr);
    if (st == FLAGOS_ERROR_OUT_OF_MEMORY) {
      // What the HAL said goes into the out-of-memory error, if it comes to that.
      last_refusal_ = flagos_hal::describe_status(d.lib->table, st);
      return nullptr;
    }
    if (st != FLAGOS_SUCCESS) throw_hal_error(*d.lib->table, st, "malloc", __FILE__, __LINE__);
    (void)requested;
    auto* block = new Block{device_, stream, bytes, ptr, false, small};
    block->owner = owner;
    segments_.insert(block);
    stats_.num_device_alloc++;
    stat_update(stats_, &DeviceStats::segment, small, 1);
    stat_update(stats_, &DeviceStats::reserved_bytes, small, bytes);
    return block;
  }

  void free_block(Block* block) {
    deactivate(block);
    merge_into_pool(block);
  }

  void deactivate(Block* block) {
    stat_update(stats_, &DeviceStats::active, block->small, -1);
    stat_update(stats_, &DeviceStats::active_bytes, block->small, -int64_t(block->size));
  }

  // Small ops free a result and allocate one of the same size right after, over and over:
  // a freed small block is parked whole, and an exact-size request on its stream takes it
  // back without the split, the merges and the pool updates in between. It counts as a
  // free block meanwhile (inactive, an inactive split where it has neighbours); at most
  // kRecent are parked, and whatever needs merged blocks (a request nothing fits,
  // empty_cache, a snapshot) merges them first.
  void park(Block* block) {
    deactivate(block);
    // Marked first: merging the evicted block below must not take this one in.
    block->recent = true;
    if (block->prev || block->next) {
      stat_update(stats_, &DeviceStats::inactive_split, true, 1);
      stat_update(stats_, &DeviceStats::inactive_split_bytes, true, block->size);
    }
    if (n_recent_ == kRecent) {
      Block* oldest = recent_[0];
      std::move(recent_.begin() + 1, recent_.end(), recent_.begin());
      --n_recent_;
      unpark(oldest);
      merge_into_pool(oldest);
    }
    recent_[n_recent_++] = block;
  }

  void unpark(Block* block) {
    block->recent = false;
    if (block->prev || block->next) {
      stat_update(stats_, &DeviceStats::inactive_split, true, -1);
      stat_update(stats_, &DeviceStats::inactive_split_bytes, true, -int64_t(block->size));
    }
  }

  Block* take_recent(size_t size, c10::StreamId stream) {
    for (size_t i = n_recent_; i-- > 0;) {  // newest first
      Block* b = recent_[i];
      if (b->size != size || b->stream != stream) continue;
      std::move(recent_.begin() + i + 1, recent_.begin() + n_recent_, recent_.begin() + i);
      --n_recent_;
      unpark(b);
      return b;
    }
    return nullptr;
  }

  void flush_recent() {
    for (size_t i = 0; i < n_recent_; ++i) {
      unpark(recent_[i]);
      merge_into_pool(recent_[i]);
    }
    n_recent_ = 0;
  }

  std::set<Block*, BlockLess>& free_set(const Block* block) {
    if (block->owner) return block->small ? block->owner->small : block->owner->large;
    return block->small ? small_ : large_;
  }

  PrivatePool* capture_pool_of(c10::StreamId stream) {
    for (const auto& [s, pool] : captures_) {
      if (s == stream) return pool;
    }
    return nullptr;
  }

  void merge_into_pool(Block* block) {
    auto& pool = free_set(block);
    // Merge with free neighbours of the same segment.
    for (Block* nb : {block->prev, block->next}) {
      if (!nb || nb->allocated || nb->pending_events > 0 || nb->recent) continue;
      pool_erase(pool, nb);
      if (nb == block->prev) {
        nb->size += block->size;
        nb->next = block->next;
        if (block->next) block->next->prev = nb;
        delete block;
        block = nb;
      } else {
        block->size += nb->size;
        block->next = nb->next;
        if (nb->next) nb->next->prev = block;
        delete nb;
      }
    }
    block->stream_uses.clear();
    pool_insert(pool, block);
  }

  // An event on each user stream of `block`; the block is reused once they complete. Runs
  // inside a tensor's deleter, so it never raises: where no event can be recorded, it
  // waits for that stream (else the device) now; where even that fails, the block is
  // never reused (kept out of the pool, still counted as reserved) and a warning says so.
  void insert_events(Block* block) {
    const auto& t = hal();
    const auto& d = hal_device(device_);
    for (auto sid : block->stream_uses) {
      flagos_stream_t hs = nullptr;
      try {
        hs = hal_stream(make_stream(device_, sid));
      } catch (const std::exception&) {
        hs = nullptr;
      }
      flagos_event_t ev = nullptr;
      flagos_status_t st = hs ? t.event_create(FLAGOS_EVENT_DISABLE_TIMING, &ev) : FLAGOS_ERROR_INVALID_HANDLE;
      if (st == FLAGOS_SUCCESS && (st = t.event_record(ev, hs)) != FLAGOS_SUCCESS) t.event_destroy(ev);
      if (st == FLAGOS_SUCCESS) {
        pending_.emplace_back(ev, block);
        block->pending_events++;
        continue;
      }
      if ((hs && t.stream_synchronize(hs) == FLAGOS_SUCCESS) ||
          t.device_synchronize(d.local_index) == FLAGOS_SUCCESS) {
        continue;  // that stream's work so far is done
      }
      TORCH_WARN("flagos allocator: cannot tell when stream ", sid, " of flagos:", int(device_),
                 " finishes with a freed block of ", block->size, " bytes (",
                 flagos_hal::describe_status(&t, st), "); the block is never reused");
      block->pending_events++;  // no event will ever release it
    }
    block->stream_uses.clear();
  }

  // Releases the blocks whose events completed. A failed query raises (as the CUDA
  // allocator does) with the event still pending, so the pool stays consistent.
  void process_events() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      flagos_status_t st = hal().event_query(it->first);
      if (st == FLAGOS_ERROR_NOT_READY) {
        ++it;
        continue;
      }
      if (st != FLAGOS_SUCCESS) FLAGOS_HAL_RAISE(hal(), st, "event_query");
      hal().event_destroy(it->first);
      Block* block = it->second;
      it = pending_.erase(it);
      if (--block->pending_events == 0) free_block(block);
    }
  }

  // Deferred frees and queued work must finish before memory goes back to the HAL: the
  // caller synchronizes the device first, without the lock, since work on the device may
  // free blocks itself (a host task dropping its tensors takes the lock).
  void synchronize_device() {
    const auto& d = hal_device(device_);
    FLAGOS_HAL_CHECK(*d.lib->table, d.lib->table->device_synchronize(d.local_index));
  }

  void release_cached() {
    process_events();
    flush_recent();
    free_whole_segments(small_);
    free_whole_segments(large_);
    release_free_private_segments();
  }

  // Returns the free blocks of `set` that are whole segments to the HAL (the device must
  // be idle); whole segments are never inactive splits.
  void free_whole_segments(std::set<Block*, BlockLess>& set) {
    const auto& d = hal_device(device_);
    for (auto it = set.begin(); it != set.end();) {
      Block* b = *it;
      if (b->prev || b->next) {  // part of a segment still in use
        ++it;
        continue;
      }
      FLAGOS_HAL_CHECK(*d.lib->table, d.lib->table->free(d.local_index, b->ptr));
      segments_.erase(b);
      stats_.num_device_free++;
      stat_update(stats_, &DeviceStats::segment, b->small, -1);
      stat_update(stats_, &DeviceStats::reserved_bytes, b->small, -int64_t(b->size));
      delete b;
      it = set.erase(it);
    }
  }

  // The whole free segments of graph pools no graph uses any more go back to the HAL;
  // a pool without segments is forgotten. The caller synchronized the device (the pools'
  // replays).
  void release_free_private_segments() {
    for (auto pool = private_pools_.begin(); pool != private_pools_.end();) {
      PrivatePool& p = *pool->second;
      if (p.use_count > 0) {
        ++pool;
        continue;
      }
      free_whole_segments(p.small);
      free_whole_segments(p.large);
      bool owns_segment = std::any_of(segments_.begin(), segments_.end(),
                                      [&](const Block* b) { return b->owner == &p; });
      pool = owns_segment ? std::next(pool) : private_pools_.erase(pool);
    }
  }

  // Free blocks go in and out of the pools only here, which keeps the inactive-split
  // statistics (free blocks inside a segment that is partly in use) exact in O(1). A
  // pooled block's neighbours never change while it is pooled: merges take it out first.
  void pool_insert(std::set<Block*, BlockLess>& pool, Block* b) {
    pool.insert(b);
    if (b->prev || b->next) {
      stat_update(stats_, &DeviceStats::inactive_split, b->small, 1);
      stat_update(stats_, &DeviceStats::inactive_split_bytes, b->small, b->size);
    }
  }

  void pool_erase(std::set<Block*, BlockLess>& pool, Block* b) {
    pool.erase(b);
    if (b->prev || b->next) {
      stat_update(stats_, &DeviceStats::inactive_split, b->small, -1);
      stat_update(stats_, &DeviceStats::inactive_split_bytes, b->small, -int64_t(b->size));
    }
  }

  [[noreturn]] void raise_oom(size_t requested) {
    stats_.num_ooms++;
    size_t free_b = 0, total_b = 0;
    const auto& d = hal_device(device_);
    d.lib->table->mem_get_info(d.local_index, &free_b, &total_b);
    auto agg = static_cast<size_t>(StatType::AGGREGATE);
    auto fmt = [](size_t b) {
      char buf[64];
      snprintf(buf, sizeof buf, "%.2f MiB", double(b) / (1 << 20));
      return std::string(buf);
    };
    TORCH_CHECK_WITH(OutOfMemoryError, false, "flagos: out of memory on flagos:", int(device_),
                     " (", d.lib->name, "): tried to allocate ", fmt(requested), "; ",
                     fmt(stats_.allocated_bytes[agg].current), " allocated by PyTorch, ",
                     fmt(stats_.reserved_bytes[agg].current), " reserved, ", fmt(free_b),
                     " free of ", fmt(total_b),
                     " device capacity. Free tensors, reduce the batch size, or call "
                     "torch.flagos.empty_cache(). (HAL '", d.lib->name,
                     "' call malloc failed: ", last_refusal_, ")");
  }

  c10::DeviceIndex device_;
  std::string last_refusal_;  // the HAL's answer to the last refused malloc
  std::mutex mutex_;
  std::set<Block*, BlockLess> small_, large_;
  std::set<Block*> segments_;  // first block of each segment
  std::vector<std::pair<flagos_event_t, Block*>> pending_;
  static constexpr size_t kRecent = 16;
  std::array<Block*, kRecent> recent_{};  // parked small blocks, oldest first
  size_t n_recent_ = 0;
  std::unordered_map<void*, std::pair<size_t, size_t>> passthrough_sizes_;  // (size, requested)
  std::map<c10::MempoolId_t, std::unique_ptr<PrivatePool>> private_pools_;
  std::vector<std::pair<c10::StreamId, PrivatePool*>> captures_;  // streams capturing now
  std::vector<Block*> deferred_;  // freed during a capture, with other streams' uses
  DeviceStats stats_;
};

bool passthrough_from_env() {
  const char* v = std::getenv("FLAGOS_ALLOCATOR");
  return v && std::string(v) == "passthrough";
}

// DataPtr context of passthrough allocations: what the deleter needs to free them.
struct Context {
  c10::DeviceIndex device;
  void* ptr;
};

thread_local AllocationLog* t_allocation_log = nullptr;

class FlagosAllocator final : public c10::DeviceAllocator {
 public:
  FlagosAllocator() : passthrough_(passthrough_from_env()) {}

  c10::DataPtr allocate(size_t n) override { return allocate_on(current_device(), n); }

  c10::DataPtr allocate_on(c10::DeviceIndex device, size_t n, bool may_fail = false) {
    c10::Device dev(c10::DeviceType::PrivateUse1, device);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &noop_delete, dev);
    if (passthrough_) {
      void* ptr = pool(device).malloc_passthrough(n, may_fail);
      if (!ptr) return c10::DataPtr(nullptr, dev);
      logged(ptr, n, device);
      return c10::DataPtr(ptr, new Context{device, ptr}, &passthrough_delete, dev);
    }
    // The block itself is the context: freeing needs no lookup and no extra allocation.
    Block* block = pool(device).malloc(n, current_stream(device).id(), may_fail);
    if (!block) return c10::DataPtr(nullptr, dev);
    logged(block->ptr, n, device);
    return c10::DataPtr(block->ptr, block, &cached_delete, dev);
  }

  static void logged(void* ptr, size_t n, c10::DeviceIndex device) {
    if (C10_UNLIKELY(t_allocation_log != nullptr))
      t_allocation_log->blocks.push_back({reinterpret_cast<uintptr_t>(ptr), n, device});
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  bool owns(const c10::DataPtr& dp) const {
    return dp.get_deleter() == &cached_delete || dp.get_deleter() == &passthrough_delete;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    const auto& hal = hal_of(current_device());
    FLAGOS_HAL_CHECK(hal, hal.memcpy(dest, src, count, FLAGOS_MEMCPY_DEVICE_TO_DEVICE));
  }

  bool initialized() override { return hals_initialized(); }

  void emptyCache(c10::MempoolId_t) override {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      if (pools_[i]) pools_[i]->empty_cache();
    }
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get_deleter() != &cached_delete || !ptr.get_context()) return;
    auto* block = static_cast<Block*>(ptr.get_context());
    pool(block->device).record_stream(block, stream.id());
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override { return pool(device).stats(); }
  void resetAccumulatedStats(c10::DeviceIndex device) override { pool(device).reset_accumulated(); }
  void resetPeakStats(c10::DeviceIndex device) override { pool(device).reset_peak(); }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    const auto& d = hal_device(device);
    size_t free_b = 0, total_b = 0;
    FLAGOS_HAL_CHECK(*d.lib->table, d.lib->table->mem_get_info(d.local_index, &free_b, &total_b));
    return {free_b, total_b};
  }

  void snapshot(std::vector<SegmentSnapshot>& out) {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      if (pools_[i]) pools_[i]->snapshot(out);
    }
  }

  bool passthrough() const { return passthrough_; }

  DevicePool& pool(c10::DeviceIndex device) {
    hal_device(device);
    std::call_once(once_[device], [&] { pools_[device] = std::make_unique<DevicePool>(device); });
    return *pools_[device];
  }

 private:
  static void noop_delete(void*) {}
  static void cached_delete(void* ctx_ptr) {
    if (in_forked_child()) return;  // the parent's device memory: leak it, never touch the HAL
    auto* block = static_cast<Block*>(ctx_ptr);
    instance().pool(block->device).free(block);
  }
  static void passthrough_delete(void* ctx_ptr) {
    std::unique_ptr<Context> ctx(static_cast<Context*>(ctx_ptr));
    if (in_forked_child()) return;  // see cached_delete
    instance().pool(ctx->device).free_passthrough(ctx->ptr);
  }

 public:
  static FlagosAllocator& instance() {
    static FlagosAllocator* alloc = new FlagosAllocator();  // leaked: deleters run at exit
    return *alloc;
  }

 private:
  bool passthrough_;
  std::array<std::unique_ptr<DevicePool>, 64> pools_;
  std::array<std::once_flag, 64> once_;
};

}  // namespace

c10::DeviceAllocator* device_allocator() { return &FlagosAllocator::instance(); }

c10::DataPtr try_allocate_on_device(c10::DeviceIndex device, size_t n) {
  return FlagosAllocator::instance().allocate_on(device, n, /*may_fail=*/true);
}
c10::DataPtr allocate_on_device(c10::DeviceIndex device, size_t n) {
  return FlagosAllocator::instance().allocate_on(device, n);
}
bool is_flagos_data_ptr(const c10::DataPtr& data_ptr) {
  return FlagosAllocator::instance().owns(data_ptr);
}
bool allocator_passthrough() { return FlagosAllocator::instance().passthrough(); }

AllocationLog* set_allocation_log(AllocationLog* log) {
  AllocationLog* previous = t_allocation_log;
  t_allocation_log = log;
  return previous;
}

std::vector<SegmentSnapshot> memory_snapshot() {
  std::vector<SegmentSnapshot> out;
  FlagosAllocator::instance().snapshot(out);
  return out;
}

std::vector<std::pair<std::string, int64_t>> memory_stats(c10::DeviceIndex device) {
  auto s = FlagosAllocator::instance().getDeviceStats(device);
  std::vector<std::pair<std::string, int64_t>> out;
  const char* pools[] = {"all", "small_pool", "large_pool"};
  auto add_array = [&](const char* name, const c10::CachingAllocator::StatArray& arr) {
    for (size_t p = 0; p < 3; ++p) {
      std::string base = std::string(name) + "." + pools[p] + ".";
      out.emplace_back(base + "current", arr[p].current);
      out.emplace_back(base + "peak", arr[p].peak);
      out.emplace_back(base + "allocated", arr[p].allocated);
      out.emplace_back(base + "freed", arr[p].freed);
    }
  };
  add_array("allocation", s.allocation);
  add_array("segment", s.segment);
  add_array("active", s.active);
  add_array("inactive_split", s.inactive_split);
  add_array("allocated_bytes", s.allocated_bytes);
  add_array("reserved_bytes", s.reserved_bytes);
  add_array("active_bytes", s.active_bytes);
  add_array("inactive_split_bytes", s.inactive_split_bytes);
  add_array("requested_bytes", s.requested_bytes);
  out.emplace_back("num_alloc_retries", s.num_alloc_retries);
  out.emplace_back("num_ooms", s.num_ooms);
  out.emplace_back("num_device_alloc", s.num_device_alloc);
  out.emplace_back("num_device_free", s.num_device_free);
  return out;
}

namespace {
DevicePool& pool_for_capture(c10::DeviceIndex device) {
  auto& alloc = FlagosAllocator::instance();
  TORCH_CHECK(!alloc.passthrough(), "flagos: graph capture needs the caching allocator's graph "
              "pools; unset FLAGOS_ALLOCATOR=passthrough to capture");
  return alloc.pool(device);
}
}  // namespace

void begin_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t pool, c10::StreamId stream) {
  pool_for_capture(device).begin_allocate_to_pool(pool, stream);
}
void end_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t pool, c10::StreamId stream) {
  pool_for_capture(device).end_allocate_to_pool(pool, stream);
}
void release_pool(c10::DeviceIndex device, c10::MempoolId_t pool) {
  pool_for_capture(device).release_pool(pool);
}

void record_data_ptr_on_stream(const c10::DataPtr& data_ptr, const c10::Stream& stream) {
  FlagosAllocator::instance().recordStream(data_ptr, stream);
}

// Register as the PrivateUse1 allocator at load time.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &FlagosAllocator::instance());

}  // namespace flagos

// flagos HAL kit: the registries behind every pointer and handle check.
//
//  - Allocations: every pointer a HAL's malloc / host_malloc handed out, with its size and
//    device, so free of a foreign, inner, already freed or other device's pointer is
//    INVALID_HANDLE, copies can be checked against live device ranges, and
//    pointer_get_attributes answers for inner pointers.
//  - Handles: live streams and events. A handle is looked up, never dereferenced, before
//    it is known to be live, so a stale or foreign handle is INVALID_HANDLE, not a crash.
//    A destroyed object stays alive while a call that found it still runs (shared_ptr).
//
// Both are created on first use and never destroyed: HAL calls (and stream worker
// threads) may still run while the process exits.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "flagos_hal/flagos_hal.h"

namespace flagos_hal {
namespace kit {

// One live allocation.
struct Allocation {
  uintptr_t base = 0;
  size_t size = 0;   // what the caller asked for
  int device = -1;   // -1: pinned host memory (host_malloc)
  bool found() const { return base != 0; }
};

class AllocationRegistry {
 public:
  void add(const void* ptr, size_t size, int device) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    live_[reinterpret_cast<uintptr_t>(ptr)] = Entry{size, device};
  }
  // The allocation starting exactly at `ptr` on `device` (-1: pinned host), removed.
  // Otherwise nothing is removed and `why` says what `ptr` is instead.
  Allocation take(const void* ptr, int device, const char** why) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto p = reinterpret_cast<uintptr_t>(ptr);
    auto it = live_.find(p);
    if (it == live_.end()) {
      *why = holding(p) != live_.end() ? "points inside an allocation, not at its start"
                        : "was not allocated by this HAL (or is already freed)";
      return {};
    }
    if (it->second.device != device) {
      *why = it->second.device < 0 ? "is pinned host memory (host_malloc), not device memory"
             : device < 0          ? "is device memory, not pinned host memory"
                                   : "was allocated on another device";
      return {};
    }
    Allocation a{p, it->second.size, it->second.device};
    live_.erase(it);
    return a;
  }
  // The live allocation holding the byte at `ptr`, if any.
  Allocation find(const void* ptr) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto p = reinterpret_cast<uintptr_t>(ptr);
    auto it = holding(p);
    if (it == live_.end()) return {};
    return Allocation{it->first, it->second.size, it->second.device};
  }
  // Device owning [ptr, ptr+size) when the whole range lies in one live device allocation,
  // else -1.
  int device_of_range(const void* ptr, size_t size) const {
    Allocation a = find(ptr);
    if (!a.found() || a.device < 0) return -1;
    auto p = reinterpret_cast<uintptr_t>(ptr);
    return size <= a.size - (p - a.base) ? a.device : -1;
  }

 private:
  struct Entry {
    size_t size;
    int device;
  };
  using Map = std::map<uintptr_t, Entry>;
  // The entry whose [base, base + max(size, 1)) holds p, else end(); needs the lock.
  Map::const_iterator holding(uintptr_t p) const {
    auto it = live_.upper_bound(p);
    if (it == live_.begin()) return live_.end();
    --it;
    return p - it->first < (it->second.size ? it->second.size : 1) ? it : live_.end();
  }
  mutable std::shared_mutex mu_;
  Map live_;
};

// Live objects of one handle type T (a stream or event type), keyed by their address.
template <class T>
class HandleRegistry {
 public:
  void add(const std::shared_ptr<T>& obj) {
    std::lock_guard<std::mutex> lock(mu_);
    live_[obj.get()] = obj;
  }
  std::shared_ptr<T> find(const void* handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(handle);
    return it == live_.end() ? nullptr : it->second;
  }
  // Removes and returns the object when `allow(obj)`; nullptr if unknown (found = false)
  // or refused (found = true).
  template <class Allow>
  std::shared_ptr<T> remove_if(const void* handle, Allow allow, bool* found) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(handle);
    *found = it != live_.end();
    if (!*found || !allow(*it->second)) return nullptr;
    std::shared_ptr<T> obj = std::move(it->second);
    live_.erase(it);
    removed_.fetch_add(1, std::memory_order_acq_rel);
    return obj;
  }
  // find() for the calls made around every op (stream query, synchronize, async work):
  // the last handle this thread used is answered without the lock until any object is
  // removed. A mutex per call is a measurable share of a small op.
  T* find_cached(const void* handle) {
    thread_local struct {
      const void* handle = nullptr;
      uint64_t removed = 0;
      std::shared_ptr<T> obj;  // keeps a removed object alive, not usable
    } cache;
    uint64_t removed = removed_.load(std::memory_order_acquire);
    if (cache.obj && cache.handle == handle && cache.removed == removed) return cache.obj.get();
    cache.obj = find(handle);
    cache.handle = handle;
    cache.removed = removed;
    return cache.obj.get();
  }
  // A snapshot of the live objects `pick` selects.
  template <class Pick>
  std::vector<std::shared_ptr<T>> select(Pick pick) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<T>> out;
    for (auto& kv : live_) {
      if (pick(*kv.second)) out.push_back(kv.second);
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::unordered_map<const void*, std::shared_ptr<T>> live_;
  std::atomic<uint64_t> removed_{0};
};

}  // namespace kit
}  // namespace flagos_hal

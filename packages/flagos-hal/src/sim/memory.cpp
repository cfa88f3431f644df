// The simulated device: memory. Each device owns an arena of host address space
// (reserved lazily, pages committed on first touch) carved by a best-fit allocator,
// so capacity, fragmentation and out-of-memory are real. Device pointers are host
// pointers (native device: CPU).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "sim.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SIM_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define SIM_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define SIM_POISON(p, n) ((void)(p), (void)(n))
#define SIM_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace flagos_sim {
namespace {

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

struct Block {
  size_t length;     // rounded to kAlignment
  size_t requested;  // what the caller asked for
};

struct Pool {
  std::mutex mu;
  char* base = nullptr;  // arena start; nullptr until the first allocation
  size_t capacity = 0;
  size_t used = 0;
  std::map<size_t, size_t> free_blocks;  // offset -> length, coalesced
  std::map<size_t, Block> live;          // offset -> block

  bool contains(const void* p) const {
    auto c = static_cast<const char*>(p);
    return base && c >= base && c < base + capacity;
  }
  // The live block holding byte offset `off`, or live.end().
  std::map<size_t, Block>::iterator holding(size_t off) {
    auto it = live.upper_bound(off);
    if (it == live.begin()) return live.end();
    --it;
    return off - it->first < (it->second.requested ? it->second.requested : 1) ? it : live.end();
  }
};

Pool* pools() {
  // Leaked on purpose: stream workers may still touch memory while the process exits.
  static Pool* p = [] {
    auto* arr = new Pool[config().devices > 0 ? config().devices : 1];
    for (int d = 0; d < config().devices; ++d) arr[d].capacity = config().capacity;
    return arr;
  }();
  return p;
}

struct PinnedHost {
  std::mutex mu;
  std::map<uintptr_t, size_t> live;  // address -> size
};
PinnedHost& pinned() {
  static auto* p = new PinnedHost;
  return *p;
}

// Returns freed pages to the OS so a long run's resident size follows its live memory.
void release_pages(char* p, size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  uintptr_t start = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (end > start && end - start >= (size_t(1) << 20)) {
    madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED);
  }
}

flagos_status_t check_range(const void* p, size_t n, const char* fn, const char* what) {
  if (device_of_range(p, n) >= 0) return FLAGOS_SUCCESS;
  return fail(FLAGOS_ERROR_INVALID_VALUE, std::string(fn) + ": " + what + " " + hex(p) + " (" +
                                              std::to_string(n) +
                                              " bytes) is not inside a live device allocation");
}

// Checks the pointers of a copy against its kind; the devices involved go to devs.
flagos_status_t check_copy(void* dst, const void* src, size_t size, flagos_memcpy_kind_t kind,
                           const char* fn, int devs[2]) {
  devs[0] = devs[1] = -1;
  if (kind < FLAGOS_MEMCPY_HOST_TO_HOST || kind > FLAGOS_MEMCPY_DEVICE_TO_DEVICE) {
    return fail(FLAGOS_ERROR_INVALID_VALUE, std::string(fn) + ": unknown memcpy kind " +
                                                std::to_string(static_cast<int>(kind)));
  }
  if (size == 0) return FLAGOS_SUCCESS;
  if (!dst || !src) return fail(FLAGOS_ERROR_INVALID_VALUE, std::string(fn) + ": NULL pointer");
  bool dst_dev = kind == FLAGOS_MEMCPY_HOST_TO_DEVICE || kind == FLAGOS_MEMCPY_DEVICE_TO_DEVICE;
  bool src_dev = kind == FLAGOS_MEMCPY_DEVICE_TO_HOST || kind == FLAGOS_MEMCPY_DEVICE_TO_DEVICE;
  if (dst_dev) {
    if (flagos_status_t st = check_range(dst, size, fn, "dst")) return st;
    devs[0] = device_of_range(dst, size);
  }
  if (src_dev) {
    if (flagos_status_t st = check_range(src, size, fn, "src")) return st;
    devs[1] = device_of_range(src, size);
  }
  return FLAGOS_SUCCESS;
}

}  // namespace

int device_of_range(const void* ptr, size_t size) {
  Pool* p = pools();
  for (int d = 0; d < config().devices; ++d) {
    if (!p[d].contains(ptr)) continue;
    std::lock_guard<std::mutex> lock(p[d].mu);
    size_t off = static_cast<size_t>(static_cast<const char*>(ptr) - p[d].base);
    auto it = p[d].holding(off);
    if (it == p[d].live.end()) return -1;
    return off + size <= it->first + it->second.requested ? d : -1;
  }
  return -1;
}

flagos_status_t mem_get_info(int device, size_t* free_bytes, size_t* total_bytes) {
  if (flagos_status_t st = check_device(device, "mem_get_info")) return st;
  if (!free_bytes || !total_bytes) return fail(FLAGOS_ERROR_INVALID_VALUE, "mem_get_info: NULL output");
  Pool& p = pools()[device];
  std::lock_guard<std::mutex> lock(p.mu);
  *free_bytes = p.capacity - p.used;
  *total_bytes = p.capacity;
  return FLAGOS_SUCCESS;
}

flagos_status_t dev_malloc(int device, size_t size, void** ptr) {
  if (flagos_status_t st = check_device(device, "malloc")) return st;
  if (!ptr) return fail(FLAGOS_ERROR_INVALID_VALUE, "malloc: ptr is NULL");
  if (inject_fault(kFaultMalloc)) {
    return fail(FLAGOS_ERROR_OUT_OF_MEMORY, "malloc: injected fault (FLAGOS_SIM_FAULT)");
  }
  if (size == 0) {
    *ptr = nullptr;
    return FLAGOS_SUCCESS;
  }
  Pool& p = pools()[device];
  std::lock_guard<std::mutex> lock(p.mu);
  auto oom = [&](const char* why) {
    return fail(FLAGOS_ERROR_OUT_OF_MEMORY,
                "malloc: out of memory on device " + std::to_string(device) + ": requested " +
                    std::to_string(size) + " bytes, " + std::to_string(p.capacity - p.used) +
                    " of " + std::to_string(p.capacity) + " bytes free" + why);
  };
  if (size > p.capacity - p.used) return oom("");
  size_t length = (size + kAlignment - 1) / kAlignment * kAlignment;
  if (!p.base) {
    // VENDOR: a real device allocates from its own memory here (e.g. the runtime's malloc).
    void* arena = mmap(nullptr, p.capacity, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (arena == MAP_FAILED) return oom(" (cannot reserve the device arena)");
    p.base = static_cast<char*>(arena);
    p.free_blocks[0] = p.capacity;
  }
  auto best = p.free_blocks.end();
  for (auto it = p.free_blocks.begin(); it != p.free_blocks.end(); ++it) {
    if (it->second >= length && (best == p.free_blocks.end() || it->second < best->second)) best = it;
  }
  if (best == p.free_blocks.end()) return oom(" (fragmented: no free block is large enough)");
  size_t off = best->first, rest = best->second - length;
  p.free_blocks.erase(best);
  if (rest) p.free_blocks[off + length] = rest;
  p.live[off] = Block{length, size};
  p.used += length;
  SIM_UNPOISON(p.base + off, size);
  SIM_POISON(p.base + off + size, length - size);
  *ptr = p.base + off;
  return FLAGOS_SUCCESS;
}

flagos_status_t dev_free(int device, void* ptr) {
  if (flagos_status_t st = check_device(device, "free")) return st;
  if (!ptr) return FLAGOS_SUCCESS;
  Pool& p = pools()[device];
  std::lock_guard<std::mutex> lock(p.mu);
  size_t off = p.contains(ptr) ? static_cast<size_t>(static_cast<char*>(ptr) - p.base) : 0;
  auto it = p.contains(ptr) ? p.live.find(off) : p.live.end();
  if (it == p.live.end()) {
    bool inner = p.contains(ptr) && p.holding(off) != p.live.end();
    return fail(FLAGOS_ERROR_INVALID_HANDLE,
                "free: " + hex(ptr) + (inner ? " points inside an allocation, not at its start"
                                             : " was not allocated on device " +
                                                   std::to_string(device) + " (or is already freed)"));
  }
  size_t length = it->second.length;
  p.live.erase(it);
  p.used -= length;
  SIM_POISON(p.base + off, length);
  release_pages(p.base + off, length);
  // Insert and coalesce with the neighbours.
  auto next = p.free_blocks.lower_bound(off);
  if (next != p.free_blocks.end() && off + length == next->first) {
    length += next->second;
    next = p.free_blocks.erase(next);
  }
  if (next != p.free_blocks.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += length;
      return FLAGOS_SUCCESS;
    }
  }
  p.free_blocks[off] = length;
  return FLAGOS_SUCCESS;
}

flagos_status_t host_malloc(size_t size, void** ptr) {
  if (!ptr) return fail(FLAGOS_ERROR_INVALID_VALUE, "host_malloc: ptr is NULL");
  if (inject_fault(kFaultHostMalloc)) {
    return fail(FLAGOS_ERROR_OUT_OF_MEMORY, "host_malloc: injected fault (FLAGOS_SIM_FAULT)");
  }
  if (size == 0) {
    *ptr = nullptr;
    return FLAGOS_SUCCESS;
  }
  // No more can be pinned than the machine has (this also keeps absurd sizes away from malloc).
  size_t phys = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = nullptr;
  // VENDOR: allocate page-locked memory with your runtime (and register it for DMA).
  if (size > phys || posix_memalign(&p, kAlignment, size) != 0) {
    return fail(FLAGOS_ERROR_OUT_OF_MEMORY, "host_malloc: cannot allocate " + std::to_string(size) +
                                                " bytes of pinned host memory");
  }
  std::lock_guard<std::mutex> lock(pinned().mu);
  pinned().live[reinterpret_cast<uintptr_t>(p)] = size;
  *ptr = p;
  return FLAGOS_SUCCESS;
}

flagos_status_t host_free(void* ptr) {
  if (!ptr) return FLAGOS_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(pinned().mu);
    if (!pinned().live.erase(reinterpret_cast<uintptr_t>(ptr))) {
      return fail(FLAGOS_ERROR_INVALID_HANDLE,
                  "host_free: " + hex(ptr) + " was not allocated by host_malloc (or is already freed)");
    }
  }
  std::free(ptr);
  return FLAGOS_SUCCESS;
}

flagos_status_t copy(void* dst, const void* src, size_t size, flagos_memcpy_kind_t kind) {
  int devs[2];
  if (flagos_status_t st = check_copy(dst, src, size, kind, "memcpy", devs)) return st;
  if (inject_fault(kFaultMemcpy)) return fail(FLAGOS_ERROR_DEVICE_FAULT, "memcpy: injected fault (FLAGOS_SIM_FAULT)");
  if (size == 0) return FLAGOS_SUCCESS;
  for (int d : devs) {
    if (d >= 0) sync_default_stream(d);
  }
  std::memmove(dst, src, size);  // VENDOR: your runtime's synchronous copy
  return FLAGOS_SUCCESS;
}

flagos_status_t copy_async(void* dst, const void* src, size_t size, flagos_memcpy_kind_t kind,
                           flagos_stream_t stream) {
  int devs[2];
  if (flagos_status_t st = check_copy(dst, src, size, kind, "memcpy_async", devs)) return st;
  if (inject_fault(kFaultMemcpy)) {
    return fail(FLAGOS_ERROR_DEVICE_FAULT, "memcpy_async: injected fault (FLAGOS_SIM_FAULT)");
  }
  // VENDOR: your runtime's asynchronous copy on the stream
  return submit(stream, [dst, src, size] { if (size) std::memmove(dst, src, size); });
}

flagos_status_t fill(void* ptr, int value, size_t size) {
  if (size && check_range(ptr, size, "memset", "ptr")) return FLAGOS_ERROR_INVALID_VALUE;
  if (inject_fault(kFaultMemset)) return fail(FLAGOS_ERROR_DEVICE_FAULT, "memset: injected fault (FLAGOS_SIM_FAULT)");
  if (size == 0) return FLAGOS_SUCCESS;
  sync_default_stream(device_of_range(ptr, size));
  std::memset(ptr, value, size);  // VENDOR: your runtime's memset
  return FLAGOS_SUCCESS;
}

flagos_status_t fill_async(void* ptr, int value, size_t size, flagos_stream_t stream) {
  if (size && check_range(ptr, size, "memset_async", "ptr")) return FLAGOS_ERROR_INVALID_VALUE;
  if (inject_fault(kFaultMemset)) {
    return fail(FLAGOS_ERROR_DEVICE_FAULT, "memset_async: injected fault (FLAGOS_SIM_FAULT)");
  }
  // VENDOR: your runtime's asynchronous memset on the stream
  return submit(stream, [ptr, value, size] { if (size) std::memset(ptr, value, size); });
}

flagos_status_t pointer_get_attributes(const void* ptr, flagos_pointer_attributes_t* attr) {
  if (!attr) return fail(FLAGOS_ERROR_INVALID_VALUE, "pointer_get_attributes: attr is NULL");
  flagos_pointer_attributes_t a{FLAGOS_POINTER_UNKNOWN, -1, nullptr, 0};
  Pool* pools_ = pools();
  for (int d = 0; d < config().devices && ptr; ++d) {
    Pool& p = pools_[d];
    if (!p.contains(ptr)) continue;
    std::lock_guard<std::mutex> lock(p.mu);
    auto it = p.holding(static_cast<size_t>(static_cast<const char*>(ptr) - p.base));
    if (it != p.live.end()) a = {FLAGOS_POINTER_DEVICE, d, p.base + it->first, it->second.requested};
  }
  if (a.type == FLAGOS_POINTER_UNKNOWN && ptr) {
    std::lock_guard<std::mutex> lock(pinned().mu);
    auto addr = reinterpret_cast<uintptr_t>(ptr);
    auto it = pinned().live.upper_bound(addr);
    if (it != pinned().live.begin() && addr - (--it)->first < it->second) {
      a = {FLAGOS_POINTER_PINNED_HOST, -1, reinterpret_cast<void*>(it->first), it->second};
    }
  }
  *attr = a;
  return FLAGOS_SUCCESS;
}

}  // namespace flagos_sim

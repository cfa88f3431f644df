// The simulated device: memory. Each device owns an arena of host address space
// (reserved lazily, pages committed on first touch) carved by a best-fit allocator,
// so capacity, fragmentation and out-of-memory are real. Device pointers are host
// pointers (native device: CPU). The kit keeps the live allocations (free checks,
// pointer attributes, copy ranges); the arena keeps the free blocks.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

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

constexpr size_t kAlignment = 256;

size_t rounded(size_t size) { return (size + kAlignment - 1) / kAlignment * kAlignment; }

struct Arena {
  std::mutex mu;
  char* base = nullptr;  // nullptr until the first allocation
  size_t capacity = 0;
  size_t used = 0;
  std::map<size_t, size_t> free_blocks;  // offset -> length, coalesced
};

Arena* arenas() {
  // Leaked on purpose: stream workers may still touch memory while the process exits.
  static Arena* a = [] {
    auto* arr = new Arena[config().devices > 0 ? config().devices : 1];
    for (int d = 0; d < config().devices; ++d) arr[d].capacity = config().capacity;
    return arr;
  }();
  return a;
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

}  // namespace

Status Sim::mem_get_info(int device, size_t* free_bytes, size_t* total_bytes) {
  Arena& a = arenas()[device];
  std::lock_guard<std::mutex> lock(a.mu);
  *free_bytes = a.capacity - a.used;
  *total_bytes = a.capacity;
  return FLAGOS_SUCCESS;
}

Status Sim::malloc(int device, size_t size, void** ptr) {
  Arena& a = arenas()[device];
  std::lock_guard<std::mutex> lock(a.mu);
  auto oom = [&](const char* why) {
    return kit::fail(FLAGOS_ERROR_OUT_OF_MEMORY,
                     "malloc: out of memory on device %d: requested %zu bytes, %zu of %zu bytes free%s",
                     device, size, a.capacity - a.used, a.capacity, why);
  };
  if (size > a.capacity - a.used) return oom("");
  size_t length = rounded(size);
  if (!a.base) {
    // The address space of the whole device, reserved once; pages are committed on touch.
    void* arena = mmap(nullptr, a.capacity, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (arena == MAP_FAILED) return oom(" (cannot reserve the device arena)");
    a.base = static_cast<char*>(arena);
    a.free_blocks[0] = a.capacity;
  }
  auto best = a.free_blocks.end();
  for (auto it = a.free_blocks.begin(); it != a.free_blocks.end(); ++it) {
    if (it->second >= length && (best == a.free_blocks.end() || it->second < best->second)) best = it;
  }
  if (best == a.free_blocks.end()) return oom(" (fragmented: no free block is large enough)");
  size_t off = best->first, rest = best->second - length;
  a.free_blocks.erase(best);
  if (rest) a.free_blocks[off + length] = rest;
  a.used += length;
  SIM_UNPOISON(a.base + off, size);
  SIM_POISON(a.base + off + size, length - size);
  *ptr = a.base + off;
  return FLAGOS_SUCCESS;
}

Status Sim::free(int device, void* ptr, size_t size) {
  Arena& a = arenas()[device];
  std::lock_guard<std::mutex> lock(a.mu);
  size_t off = static_cast<size_t>(static_cast<char*>(ptr) - a.base), length = rounded(size);
  a.used -= length;
  SIM_POISON(a.base + off, length);
  release_pages(a.base + off, length);
  // Insert and coalesce with the neighbours.
  auto next = a.free_blocks.lower_bound(off);
  if (next != a.free_blocks.end() && off + length == next->first) {
    length += next->second;
    next = a.free_blocks.erase(next);
  }
  if (next != a.free_blocks.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += length;
      return FLAGOS_SUCCESS;
    }
  }
  a.free_blocks[off] = length;
  return FLAGOS_SUCCESS;
}

Status Sim::host_malloc(size_t size, void** ptr) {
  if (posix_memalign(ptr, kAlignment, size) != 0) {
    return kit::fail(FLAGOS_ERROR_OUT_OF_MEMORY, "host_malloc: cannot allocate %zu bytes of pinned host memory",
                     size);
  }
  return FLAGOS_SUCCESS;
}

Status Sim::host_free(void* ptr, size_t) {
  std::free(ptr);
  return FLAGOS_SUCCESS;
}

Status Sim::memcpy(void* dst, const void* src, size_t size, flagos_memcpy_kind_t, int, int) {
  std::memmove(dst, src, size);
  return FLAGOS_SUCCESS;
}

Status Sim::memset(void* ptr, int value, size_t size, int) {
  std::memset(ptr, value, size);
  return FLAGOS_SUCCESS;
}

Status Sim::memcpy_async(void* dst, const void* src, size_t size, flagos_memcpy_kind_t, Stream& stream) {
  stream.push([dst, src, size] { std::memmove(dst, src, size); });
  return FLAGOS_SUCCESS;
}

Status Sim::memset_async(void* ptr, int value, size_t size, Stream& stream) {
  stream.push([ptr, value, size] { std::memset(ptr, value, size); });
  return FLAGOS_SUCCESS;
}

}  // namespace flagos_sim

// The @name@ HAL: device memory, pinned host memory, copies and memsets.
#include <cstdlib>
#include <cstring>

#include "@name@.hpp"

namespace flagos_@name@ {
namespace {

// Host-memory placeholder: bytes in use per device, for mem_get_info.
std::atomic<uint64_t> g_used[64];

}  // namespace

Status @Name@::mem_get_info(int device, size_t* free_bytes, size_t* total_bytes) {
  // TODO(@name@): your runtime's free/total memory query
  flagos_device_properties_t p{};
  properties(device, &p);
  *total_bytes = p.total_memory;
  *free_bytes = p.total_memory - g_used[device].load();
  return FLAGOS_SUCCESS;
}

Status @Name@::malloc(int device, size_t size, void** ptr) {
  // TODO(@name@): your runtime's device allocation (its out-of-memory error becomes
  // kit::fail(FLAGOS_ERROR_OUT_OF_MEMORY, ...))
  size_t total = 0, free_bytes = 0;
  mem_get_info(device, &free_bytes, &total);
  if (size > free_bytes || posix_memalign(ptr, 256, size) != 0) {
    return kit::fail(FLAGOS_ERROR_OUT_OF_MEMORY, "malloc: %zu bytes on device %d: %zu free", size, device,
                     free_bytes);
  }
  g_used[device] += size;
  return FLAGOS_SUCCESS;
}

Status @Name@::free(int device, void* ptr, size_t size) {
  std::free(ptr);  // TODO(@name@): your runtime's device free
  g_used[device] -= size;
  return FLAGOS_SUCCESS;
}

Status @Name@::host_malloc(size_t size, void** ptr) {
  // TODO(@name@): your runtime's page-locked host allocation
  if (posix_memalign(ptr, 256, size) != 0) {
    return kit::fail(FLAGOS_ERROR_OUT_OF_MEMORY, "host_malloc: %zu bytes", size);
  }
  return FLAGOS_SUCCESS;
}

Status @Name@::host_free(void* ptr, size_t) {
  std::free(ptr);  // TODO(@name@): your runtime's pinned host free
  return FLAGOS_SUCCESS;
}

Status @Name@::memcpy(void* dst, const void* src, size_t size, flagos_memcpy_kind_t, int, int) {
  std::memmove(dst, src, size);  // TODO(@name@): your runtime's synchronous copy
  return FLAGOS_SUCCESS;
}

Status @Name@::memset(void* ptr, int value, size_t size, int) {
  std::memset(ptr, value, size);  // TODO(@name@): your runtime's synchronous memset
  return FLAGOS_SUCCESS;
}

Status @Name@::memcpy_async(void* dst, const void* src, size_t size, flagos_memcpy_kind_t, Stream&) {
  std::memmove(dst, src, size);  // TODO(@name@): your runtime's copy queued on the stream
  return FLAGOS_SUCCESS;
}

Status @Name@::memset_async(void* ptr, int value, size_t size, Stream&) {
  std::memset(ptr, value, size);  // TODO(@name@): your runtime's memset queued on the stream
  return FLAGOS_SUCCESS;
}

}  // namespace flagos_@name@

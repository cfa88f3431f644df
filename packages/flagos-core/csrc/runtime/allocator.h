// The flagos caching device allocator: one pool per device over HAL malloc/free.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <cstdint>
#include <string>
#include <vector>

namespace flagos {

struct SegmentSnapshot {
  int device;
  uintptr_t address;
  size_t total_size;
  size_t allocated_size;
  int64_t stream_id;
  std::vector<std::pair<size_t, bool>> blocks;  // (size, allocated)
};

c10::DeviceAllocator* device_allocator();
// Allocates on flagos:`device` (on its current stream) whatever the current device is, if
// that fits without freeing cached memory; an empty DataPtr (no error, no OOM counted) else.
c10::DataPtr try_allocate_on_device(c10::DeviceIndex device, size_t n);
// Allocates on flagos:`device` whatever the current device is, freeing cached blocks where
// needed, raising torch.OutOfMemoryError (with the numbers) if that is not enough.
c10::DataPtr allocate_on_device(c10::DeviceIndex device, size_t n);
// Whether a DataPtr came from the flagos allocator (whatever device it is now tagged with).
bool is_flagos_data_ptr(const c10::DataPtr& data_ptr);
// Statistics of one device as name -> value, in the key style of torch.cuda.memory_stats().
std::vector<std::pair<std::string, int64_t>> memory_stats(c10::DeviceIndex device);
std::vector<SegmentSnapshot> memory_snapshot();
bool allocator_passthrough();

// The device allocations this thread makes while a log is set: the launch cache learns
// from it which of a Python kernel's launch pointers are temporaries
// (engines/launch/launch_cache.h).
struct AllocationLog {
  struct Block {
    uintptr_t ptr;
    size_t bytes;
    c10::DeviceIndex device;
  };
  std::vector<Block> blocks;
};
// Sets this thread's log (nullptr: none) and returns the one set before.
AllocationLog* set_allocation_log(AllocationLog* log);

// Graph pools (the stream graphs of csrc/capture/): while `stream` of flagos:`device`
// captures, its allocations come from pool `pool`, whose memory no other allocation
// takes. Naming a pool that exists adds a user; release_pool drops one, and a pool
// without users goes back to the HAL as its blocks become free.
void begin_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t pool, c10::StreamId stream);
// Ends what begin_allocate_to_pool(device, pool, stream) began; other streams capturing
// into the same pool go on.
void end_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t pool, c10::StreamId stream);
void release_pool(c10::DeviceIndex device, c10::MempoolId_t pool);

}  // namespace flagos

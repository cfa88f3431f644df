// Internal header of the simulated device: what device.cpp, memory.cpp and stream.cpp
// share. Nothing here is exported; the only exported symbol is flagos_hal_get_table.
//
// Bring-up note: `python -m flagos_hal new-vendor NAME` copies these files as the
// starting point of a new HAL. Comments starting with "VENDOR:" become TODO markers there:
// they are the places where a real device's runtime call replaces the host-memory one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flagos_hal/flagos_hal.h"

namespace flagos_sim {

// ---- configuration, read once when the library is loaded (device.cpp) ------------
enum Fault { kFaultMalloc = 0, kFaultMemcpy, kFaultMemset, kFaultHostMalloc, kFaultKinds };

struct Config {
  int devices = 2;                       // FLAGOS_SIM_DEVICES
  size_t capacity = size_t(4) << 30;     // FLAGOS_SIM_MEMORY, bytes per device
  std::vector<uint64_t> faults[kFaultKinds];  // FLAGOS_SIM_FAULT: 1-based call numbers
};
const Config& config();

// Counts one call of `kind`; true when this call is one FLAGOS_SIM_FAULT asks to fail.
bool inject_fault(Fault kind);

// Records `message` as this thread's last error and returns `status`.
flagos_status_t fail(flagos_status_t status, const std::string& message);
// INVALID_DEVICE (with a message naming `what`) unless 0 <= device < device count.
flagos_status_t check_device(int device, const char* what);

// ---- memory (memory.cpp) ---------------------------------------------------------
constexpr size_t kAlignment = 256;
// Device owning [ptr, ptr+size) when that range lies inside one live allocation, else -1.
int device_of_range(const void* ptr, size_t size);

// ---- streams (stream.cpp) --------------------------------------------------------
using Task = std::function<void()>;
// Queue `task` on `stream`; INVALID_HANDLE for an unknown stream.
flagos_status_t submit(flagos_stream_t stream, Task task);
// Wait for the work queued so far on the default stream of `device` (if it exists).
void sync_default_stream(int device);

// ---- the table entries, one file per group ---------------------------------------
// device.cpp
flagos_status_t get_name(const char** name);
flagos_status_t get_version(const char** version);
flagos_status_t get_error_string(flagos_status_t status, const char** text);
flagos_status_t get_last_error_message(const char** text);
flagos_status_t get_native_device(flagos_native_device_t* kind);
flagos_status_t get_device_count(int* count);
flagos_status_t get_device(int* device);
flagos_status_t set_device(int device);
flagos_status_t get_device_properties(int device, flagos_device_properties_t* props);
// memory.cpp
flagos_status_t mem_get_info(int device, size_t* free_bytes, size_t* total_bytes);
flagos_status_t dev_malloc(int device, size_t size, void** ptr);
flagos_status_t dev_free(int device, void* ptr);
flagos_status_t host_malloc(size_t size, void** ptr);
flagos_status_t host_free(void* ptr);
flagos_status_t copy(void* dst, const void* src, size_t size, flagos_memcpy_kind_t kind);
flagos_status_t copy_async(void* dst, const void* src, size_t size, flagos_memcpy_kind_t kind,
                           flagos_stream_t stream);
flagos_status_t fill(void* ptr, int value, size_t size);
flagos_status_t fill_async(void* ptr, int value, size_t size, flagos_stream_t stream);
flagos_status_t pointer_get_attributes(const void* ptr, flagos_pointer_attributes_t* attr);
// stream.cpp
flagos_status_t device_synchronize(int device);
flagos_status_t stream_create(int device, int priority, flagos_stream_t* stream);
flagos_status_t stream_get_priority_range(int* least, int* greatest);
flagos_status_t stream_get_default(int device, flagos_stream_t* stream);
flagos_status_t stream_destroy(flagos_stream_t stream);
flagos_status_t stream_query(flagos_stream_t stream);
flagos_status_t stream_synchronize(flagos_stream_t stream);
flagos_status_t stream_wait_event(flagos_stream_t stream, flagos_event_t event);
flagos_status_t stream_get_device(flagos_stream_t stream, int* device);
flagos_status_t stream_get_native_handle(flagos_stream_t stream, void** handle);
flagos_status_t event_create(unsigned int flags, flagos_event_t* event);
flagos_status_t event_destroy(flagos_event_t event);
flagos_status_t event_record(flagos_event_t event, flagos_stream_t stream);
flagos_status_t event_query(flagos_event_t event);
flagos_status_t event_synchronize(flagos_event_t event);
flagos_status_t event_elapsed_time(float* ms, flagos_event_t start, flagos_event_t end);

}  // namespace flagos_sim

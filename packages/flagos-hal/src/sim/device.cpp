// The simulated device: identity, configuration, fault injection, devices, and the
// exported function table.
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <string>
#include <thread>

#include "flagos_hal/status_text.h"
#include "sim.hpp"

namespace flagos_sim {
namespace {

constexpr const char* kHalName = "sim";
constexpr const char* kVersion = "flagos-sim 0.1.0";
constexpr const char* kEnvPrefix = "FLAGOS_SIM_";

thread_local std::string t_last_error;
thread_local int t_current_device = 0;
std::atomic<uint64_t> g_fault_calls[kFaultKinds];

void warn(const std::string& text) { std::fprintf(stderr, "flagos-sim: warning: %s\n", text.c_str()); }

// "4G", "512MiB", "1048576" -> bytes; false on garbage or overflow.
bool parse_size(const char* text, size_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || errno != 0 || text[0] == '-') return false;
  std::string suffix(end);
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.size() == 3 && suffix.compare(1, 2, "IB") == 0) suffix.resize(1);
  if (suffix.size() == 2 && suffix[1] == 'B') suffix.resize(1);
  int shift = suffix.empty() ? 0 : suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30
            : suffix == "T" ? 40 : -1;
  if (shift < 0 || (shift && value > (~0ull >> shift))) return false;
  *out = static_cast<size_t>(value << shift);
  return true;
}

// "malloc:3,memcpy:2": the 3rd malloc call and the 2nd memcpy call fail.
void parse_faults(const char* text, Config* c) {
  static const char* kinds[kFaultKinds] = {"malloc", "memcpy", "memset", "host_malloc"};
  std::string spec(text);
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (item.empty()) continue;
    size_t colon = item.find(':');
    std::string kind = item.substr(0, colon);
    long long n = colon == std::string::npos ? 0 : std::atoll(item.c_str() + colon + 1);
    int k = 0;
    while (k < kFaultKinds && kind != kinds[k]) ++k;
    if (k == kFaultKinds || n <= 0) {
      warn(std::string("ignoring FLAGOS_SIM_FAULT entry '") + item +
           "' (expected KIND:N, KIND one of malloc, memcpy, memset, host_malloc)");
      continue;
    }
    c->faults[k].push_back(static_cast<uint64_t>(n));
  }
}

Config load_config() {
  Config c;
  std::string prefix(kEnvPrefix);
  if (const char* s = std::getenv((prefix + "DEVICES").c_str())) {
    char* end = nullptr;
    long n = std::strtol(s, &end, 10);
    if (end != s && *end == '\0' && n >= 0 && n <= 64) c.devices = static_cast<int>(n);
    else warn(prefix + "DEVICES='" + s + "' is not a number in 0..64; using 2");
  }
  if (const char* s = std::getenv((prefix + "MEMORY").c_str())) {
    size_t bytes = 0;
    if (parse_size(s, &bytes) && bytes >= kAlignment) c.capacity = bytes / kAlignment * kAlignment;
    else warn(prefix + "MEMORY='" + s + "' is not a size (e.g. 4G, 512MiB, 1048576); using 4GiB");
  }
  if (const char* s = std::getenv((prefix + "FAULT").c_str())) parse_faults(s, &c);
  return c;
}

const Config g_config = load_config();  // read once, when the library is loaded

}  // namespace

const Config& config() { return g_config; }

bool inject_fault(Fault kind) {
  uint64_t n = ++g_fault_calls[kind];
  for (uint64_t at : g_config.faults[kind]) {
    if (at == n) return true;
  }
  return false;
}

flagos_status_t fail(flagos_status_t status, const std::string& message) {
  t_last_error = message;
  return status;
}

flagos_status_t check_device(int device, const char* what) {
  if (device >= 0 && device < g_config.devices) return FLAGOS_SUCCESS;
  return fail(FLAGOS_ERROR_INVALID_DEVICE, std::string(what) + ": device " + std::to_string(device) +
                                               " out of range (this HAL has " +
                                               std::to_string(g_config.devices) + " devices)");
}

flagos_status_t get_name(const char** name) {
  if (!name) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_name: name is NULL");
  *name = kHalName;
  return FLAGOS_SUCCESS;
}

flagos_status_t get_version(const char** version) {
  if (!version) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_version: version is NULL");
  *version = kVersion;  // VENDOR: append your driver and runtime versions
  return FLAGOS_SUCCESS;
}

flagos_status_t get_error_string(flagos_status_t status, const char** text) {
  if (!text) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_error_string: text is NULL");
  *text = flagos_status_text(status);
  return FLAGOS_SUCCESS;
}

flagos_status_t get_last_error_message(const char** text) {
  if (!text) return FLAGOS_ERROR_INVALID_VALUE;
  *text = t_last_error.c_str();
  return FLAGOS_SUCCESS;
}

flagos_status_t get_native_device(flagos_native_device_t* kind) {
  if (!kind) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_native_device: kind is NULL");
  *kind = FLAGOS_NATIVE_CPU;  // VENDOR: FLAGOS_NATIVE_NONE unless torch can address your memory
  return FLAGOS_SUCCESS;
}

flagos_status_t get_device_count(int* count) {
  if (!count) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_device_count: count is NULL");
  *count = g_config.devices;  // VENDOR: ask the driver; 0 (and SUCCESS) when it is absent
  return FLAGOS_SUCCESS;
}

flagos_status_t get_device(int* device) {
  if (!device) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_device: device is NULL");
  *device = t_current_device;
  return FLAGOS_SUCCESS;
}

flagos_status_t set_device(int device) {
  if (flagos_status_t st = check_device(device, "set_device")) return st;
  t_current_device = device;  // VENDOR: make the device's context current on this thread
  return FLAGOS_SUCCESS;
}

flagos_status_t get_device_properties(int device, flagos_device_properties_t* props) {
  if (flagos_status_t st = check_device(device, "get_device_properties")) return st;
  if (!props || props->struct_size < sizeof(uint32_t)) {
    return fail(FLAGOS_ERROR_INVALID_VALUE, "get_device_properties: props is NULL or struct_size < 4");
  }
  flagos_device_properties_t p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = props->struct_size;
  // VENDOR: fill from the driver's device query
  std::snprintf(p.name, sizeof p.name, "%s", "flagos-sim");
  p.total_memory = g_config.capacity;
  unsigned threads = std::thread::hardware_concurrency();
  p.compute_units = static_cast<int32_t>(threads ? threads : 1);
  p.native_device_index = -1;
  size_t n = props->struct_size < sizeof p ? props->struct_size : sizeof p;
  std::memcpy(props, &p, n);
  return FLAGOS_SUCCESS;
}

namespace {
flagos_hal_table_t make_table() {
  flagos_hal_table_t t;
  std::memset(&t, 0, sizeof t);
  t.abi_version = FLAGOS_HAL_ABI_VERSION;
  t.struct_size = sizeof(flagos_hal_table_t);
  t.get_name = get_name;
  t.get_version = get_version;
  t.get_error_string = get_error_string;
  t.get_last_error_message = get_last_error_message;
  t.get_native_device = get_native_device;
  t.get_device_count = get_device_count;
  t.get_device = get_device;
  t.set_device = set_device;
  t.get_device_properties = get_device_properties;
  t.device_synchronize = device_synchronize;
  t.mem_get_info = mem_get_info;
  t.malloc = dev_malloc;
  t.free = dev_free;
  t.host_malloc = host_malloc;
  t.host_free = host_free;
  t.memcpy = copy;
  t.memcpy_async = copy_async;
  t.memset = fill;
  t.memset_async = fill_async;
  t.pointer_get_attributes = pointer_get_attributes;
  t.stream_create = stream_create;
  t.stream_get_priority_range = stream_get_priority_range;
  t.stream_get_default = stream_get_default;
  t.stream_destroy = stream_destroy;
  t.stream_query = stream_query;
  t.stream_synchronize = stream_synchronize;
  t.stream_wait_event = stream_wait_event;
  t.stream_get_device = stream_get_device;
  t.stream_get_native_handle = stream_get_native_handle;
  t.event_create = event_create;
  t.event_destroy = event_destroy;
  t.event_record = event_record;
  t.event_query = event_query;
  t.event_synchronize = event_synchronize;
  t.event_elapsed_time = event_elapsed_time;
  return t;
}
}  // namespace

}  // namespace flagos_sim

extern "C" FLAGOS_HAL_EXPORT flagos_status_t flagos_hal_get_table(uint32_t abi_major,
                                                                  const flagos_hal_table_t** out) {
  if (!out) return flagos_sim::fail(FLAGOS_ERROR_INVALID_VALUE, "flagos_hal_get_table: out is NULL");
  if (abi_major != FLAGOS_HAL_ABI_MAJOR) {
    return flagos_sim::fail(FLAGOS_ERROR_VERSION_MISMATCH,
                            "flagos_hal_get_table: this HAL serves ABI major " +
                                std::to_string(FLAGOS_HAL_ABI_MAJOR) + ", asked for " +
                                std::to_string(abi_major));
  }
  static const flagos_hal_table_t table = flagos_sim::make_table();
  *out = &table;
  return FLAGOS_SUCCESS;
}

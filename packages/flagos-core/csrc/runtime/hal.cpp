#include "runtime/hal.h"

#include "runtime/device_fault.h"
#include "runtime/resize.h"

#include <mutex>

namespace flagos {
namespace {

std::mutex g_init_mutex;
std::vector<std::string> g_paths;
std::vector<flagos_hal::Library> g_hals;
std::vector<HalDevice> g_devices;
bool g_initialized = false;

thread_local c10::DeviceIndex t_current_device = 0;

}  // namespace

void init_hals(const std::vector<std::string>& paths) {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_initialized) {
    TORCH_CHECK(paths == g_paths,
                "flagos: HALs are already loaded; set FLAGOS_HAL before the first use of flagos");
    return;
  }
  std::vector<flagos_hal::Library> hals;
  std::vector<HalDevice> devices;
  for (const auto& path : paths) {
    hals.push_back(flagos_hal::open_library(path));
  }
  for (size_t slot = 0; slot < hals.size(); ++slot) {
    int count = 0;
    const auto* t = hals[slot].table;
    flagos_status_t st = t->get_device_count(&count);
    TORCH_CHECK(st == FLAGOS_SUCCESS, "flagos: HAL '", hals[slot].name, "' (", hals[slot].path,
                ") failed to count devices: ", flagos_hal::describe_status(t, st));
    for (int i = 0; i < count; ++i) devices.push_back({nullptr, i, static_cast<int>(slot)});
  }
  g_hals = std::move(hals);
  for (auto& d : devices) d.lib = &g_hals[d.hal_slot];
  TORCH_CHECK(devices.size() <= 64, "flagos: at most 64 devices are supported");
  g_devices = std::move(devices);
  g_paths = paths;
  g_initialized = true;
  detail::g_device_table = g_devices.data();
  if (!in_forked_child()) detail::g_usable_devices.store(int(g_devices.size()));
}

bool hals_initialized() { return g_initialized; }
const std::vector<flagos_hal::Library>& loaded_hals() { return g_hals; }

c10::DeviceIndex device_count() noexcept { return static_cast<c10::DeviceIndex>(g_devices.size()); }

namespace detail {
const HalDevice* g_device_table = nullptr;
std::atomic<int> g_usable_devices{0};

const HalDevice& hal_device_checked(c10::DeviceIndex index) {
  TORCH_CHECK(!in_forked_child(),
              "flagos: cannot use flagos devices in a forked subprocess (the device runtime does "
              "not survive fork). Use the 'spawn' multiprocessing start method");
  TORCH_CHECK(g_initialized, "flagos: no HAL is loaded; import flagos (or torch) first");
  TORCH_CHECK(index >= 0 && index < device_count(), "flagos: invalid device index ", int(index),
              " (", int(device_count()), " flagos device(s) available)");
  return g_devices[index];
}
}  // namespace detail

void disable_devices_after_fork() { detail::g_usable_devices.store(0); }

flagos_native_device_t native_device_of(c10::DeviceIndex index) {
  flagos_native_device_t kind = FLAGOS_NATIVE_NONE;
  const auto& hal = hal_of(index);
  FLAGOS_HAL_CHECK(hal, hal.get_native_device(&kind));
  return kind;
}

std::optional<c10::DeviceIndex> device_of_pointer(const void* ptr) {
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
    const auto& d = hal_device(i);
    flagos_pointer_attributes_t attr{};
    if (d.lib->table->pointer_get_attributes(ptr, &attr) == FLAGOS_SUCCESS &&
        attr.type == FLAGOS_POINTER_DEVICE && attr.device == d.local_index) {
      return i;
    }
  }
  return std::nullopt;
}

c10::DeviceIndex current_device() { return t_current_device; }

void set_current_device(c10::DeviceIndex index) {
  const auto& d = hal_device(index);
  FLAGOS_HAL_CHECK(*d.lib->table, d.lib->table->set_device(d.local_index));
  t_current_device = index;
}

namespace {
// "hal.memcpy_async(dst, src, n, kind, s)" or "d.lib->table->free(...)" -> the HAL
// function's name, which is what a reader of the error (and the HAL's docs) knows.
std::string hal_function(const char* call) {
  std::string s(call);
  size_t paren = s.find('(');
  if (paren != std::string::npos) s.resize(paren);
  size_t sep = s.find_last_of(".>");
  return sep == std::string::npos ? s : s.substr(sep + 1);
}

std::mutex g_fault_mutex;
std::vector<std::string> g_faults;  // per flagos device: why it is lost ("" while usable)

// After a DEVICE_FAULT from `hal`: probes each of its devices not yet known lost (a query
// of the default stream, which any live device answers) and records those that fail too.
// Returns the note for the error message, "" when every device still answers.
std::string note_lost_devices(const flagos_hal_table_t& hal, const std::string& error) {
  std::lock_guard<std::mutex> lock(g_fault_mutex);
  g_faults.resize(g_devices.size());
  std::string now, before, first;
  for (size_t i = 0; i < g_devices.size(); ++i) {
    if (g_devices[i].lib->table != &hal) continue;
    std::string name = "flagos:" + std::to_string(i);
    if (!g_faults[i].empty()) {
      before += (before.empty() ? "" : ", ") + name;
      first = g_faults[i];
      continue;
    }
    flagos_stream_t s = nullptr;
    flagos_status_t q = hal.stream_get_default(g_devices[i].local_index, &s);
    if (q == FLAGOS_SUCCESS) q = hal.stream_query(s);
    if (q == FLAGOS_SUCCESS || q == FLAGOS_ERROR_NOT_READY) continue;
    g_faults[i] = error;
    now += (now.empty() ? "" : ", ") + name;
  }
  auto is = [](const std::string& names) { return names.find(',') == std::string::npos ? " is" : " are"; };
  std::string note;
  if (!now.empty()) {
    note += ". " + now + is(now) + " unusable from now on: failed again when probed, as after "
            "a sticky error (every call fails); restart the process";
  }
  if (!before.empty()) note += ". " + before + is(before) + " unusable since an earlier error: " + first;
  return note;
}
}  // namespace

std::optional<std::string> device_fault(c10::DeviceIndex index) {
  std::lock_guard<std::mutex> lock(g_fault_mutex);
  if (index < 0 || static_cast<size_t>(index) >= g_faults.size() || g_faults[index].empty()) {
    return std::nullopt;
  }
  return g_faults[index];
}

void throw_hal_error(const flagos_hal_table_t& hal, flagos_status_t st, const char* call,
                     const char* file, int line) {
  const char* name = "?";
  if (hal.get_name) hal.get_name(&name);
  std::string msg = std::string("flagos: HAL '") + name + "' call " + hal_function(call) +
                    " failed: " + flagos_hal::describe_status(&hal, st);
  if (st == FLAGOS_ERROR_DEVICE_FAULT) msg += note_lost_devices(hal, msg);
  if (st == FLAGOS_ERROR_OUT_OF_MEMORY) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
  }
  ::c10::detail::torchCheckFail(__func__, file, static_cast<uint32_t>(line), msg);
}

}  // namespace flagos

// The simulated device: configuration, identity, devices, and the exported entry point.
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "sim.hpp"

namespace flagos_sim {
namespace {

constexpr const char* kEnvPrefix = "FLAGOS_SIM_";

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
    if (parse_size(s, &bytes) && bytes >= 256) c.capacity = bytes / 256 * 256;
    else warn(prefix + "MEMORY='" + s + "' is not a size (e.g. 4G, 512MiB, 1048576); using 4GiB");
  }
  return c;
}

const Config g_config = load_config();  // read once, when the library is loaded

}  // namespace

const Config& config() { return g_config; }

// Fault injection is the kit's (kit/faults.hpp): FLAGOS_SIM_FAULT, and the test control
// every sim stream carries (sim_runtime.h).
const flagos_hal_sim_control_t* test_control() { return kit::Hal<Sim>::test_control(); }

// ---- devices -------------------------------------------------------------------------
Status Sim::open(int* device_count) {
  *device_count = g_config.devices;
  return FLAGOS_SUCCESS;
}

std::string Sim::version() { return "flagos-sim 0.1.0"; }

Status Sim::properties(int, flagos_device_properties_t* props) {
  std::snprintf(props->name, sizeof props->name, "%s", "flagos-sim");
  props->total_memory = g_config.capacity;
  unsigned threads = std::thread::hardware_concurrency();
  props->compute_units = static_cast<int32_t>(threads ? threads : 1);
  return FLAGOS_SUCCESS;
}

}  // namespace flagos_sim

FLAGOS_HAL_KIT_ENTRY(flagos_sim::Sim)

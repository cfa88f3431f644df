// The simulated device: configuration, fault injection, identity, devices, and the
// exported entry point.
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "sim.hpp"

namespace flagos_sim {
namespace {

using kit::Op;
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

// ---- fault injection ---------------------------------------------------------------
// FLAGOS_SIM_FAULT=KIND:N,...: the N-th call (1-based, from library load) counted by KIND
// fails with KIND's status. A kind counts the calls of all its ops with one counter, so
// "memcpy:2" is the second copy, synchronous or not. A new kind is one line here: any
// call the kit can intercept (kit::Op) can fail this way.
struct FaultKind {
  const char* name;
  Status status;
  std::vector<Op> ops;
};
const FaultKind kFaultKinds[] = {
    {"malloc", FLAGOS_ERROR_OUT_OF_MEMORY, {Op::kMalloc}},
    {"host_malloc", FLAGOS_ERROR_OUT_OF_MEMORY, {Op::kHostMalloc}},
    {"memcpy", FLAGOS_ERROR_DEVICE_FAULT, {Op::kMemcpy, Op::kMemcpyAsync}},
    {"memset", FLAGOS_ERROR_DEVICE_FAULT, {Op::kMemset, Op::kMemsetAsync}},
};
constexpr int kKinds = sizeof kFaultKinds / sizeof kFaultKinds[0];

struct Faults {
  int kind_of[static_cast<int>(Op::kCount)];  // op -> index into kFaultKinds, or -1
  std::vector<uint64_t> at[kKinds];            // call numbers that fail, per kind
  std::atomic<uint64_t> calls[kKinds] = {};
  bool any = false;
};

Faults* load_faults() {
  auto* f = new Faults;  // never freed: consulted until the process exits
  for (int& k : f->kind_of) k = -1;
  for (int k = 0; k < kKinds; ++k) {
    for (Op op : kFaultKinds[k].ops) f->kind_of[static_cast<int>(op)] = k;
  }
  const char* text = std::getenv("FLAGOS_SIM_FAULT");
  std::string spec(text ? text : "");
  for (size_t pos = 0; pos <= spec.size();) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (item.empty()) continue;
    size_t colon = item.find(':');
    std::string kind = item.substr(0, colon);
    long long n = colon == std::string::npos ? 0 : std::atoll(item.c_str() + colon + 1);
    int k = 0;
    while (k < kKinds && kind != kFaultKinds[k].name) ++k;
    if (k == kKinds || n <= 0) {
      std::string names;
      for (const FaultKind& fk : kFaultKinds) names += (names.empty() ? "" : ", ") + std::string(fk.name);
      warn("ignoring FLAGOS_SIM_FAULT entry '" + item + "' (expected KIND:N, KIND one of " + names + ")");
      continue;
    }
    f->at[k].push_back(static_cast<uint64_t>(n));
    f->any = true;
  }
  return f;
}

Faults* const g_faults = load_faults();

}  // namespace

const Config& config() { return g_config; }

Status Sim::intercept(Op op) {
  if (!g_faults->any) return FLAGOS_SUCCESS;
  int k = g_faults->kind_of[static_cast<int>(op)];
  if (k < 0) return FLAGOS_SUCCESS;
  uint64_t n = ++g_faults->calls[k];
  for (uint64_t at : g_faults->at[k]) {
    if (at == n) return kit::fail(kFaultKinds[k].status, "%s: injected fault (FLAGOS_SIM_FAULT)", kit::op_name(op));
  }
  return FLAGOS_SUCCESS;
}

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

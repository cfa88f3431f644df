// The simulated device: configuration, fault injection, identity, devices, and the
// exported entry point.
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
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
// "memcpy:2" is the second copy, synchronous or not. Kinds are named after the HAL call
// they fail. A new kind is one line here: any call the kit can intercept (kit::Op) can
// fail this way. The same faults can be armed at run time (arm_faults, sim_runtime.h).
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
    {"free", FLAGOS_ERROR_DEVICE_FAULT, {Op::kFree}},
    {"stream_create", FLAGOS_ERROR_DEVICE_FAULT, {Op::kStreamCreate}},
    {"stream_query", FLAGOS_ERROR_DEVICE_FAULT, {Op::kStreamQuery}},
    {"stream_synchronize", FLAGOS_ERROR_DEVICE_FAULT, {Op::kStreamSynchronize}},
    {"stream_wait_event", FLAGOS_ERROR_DEVICE_FAULT, {Op::kStreamWaitEvent}},
    {"event_record", FLAGOS_ERROR_DEVICE_FAULT, {Op::kEventRecord}},
    {"event_query", FLAGOS_ERROR_DEVICE_FAULT, {Op::kEventQuery}},
    {"event_synchronize", FLAGOS_ERROR_DEVICE_FAULT, {Op::kEventSynchronize}},
    {"device_synchronize", FLAGOS_ERROR_DEVICE_FAULT, {Op::kDeviceSynchronize}},
};
constexpr int kKinds = sizeof kFaultKinds / sizeof kFaultKinds[0];
constexpr int kMaxPerKind = 16;  // armed call numbers per kind
constexpr uint64_t kLostBit = uint64_t(1) << 63;  // KIND:N:lost, the device is lost after it

// Read by every intercepted call, from any thread, while a test may re-arm: atomics only.
struct Faults {
  int kind_of[static_cast<int>(Op::kCount)];   // op -> index into kFaultKinds, or -1
  std::atomic<uint64_t> at[kKinds][kMaxPerKind];  // call numbers that fail; 0: unused
  std::atomic<uint64_t> calls[kKinds];
  std::atomic<bool> counting{false};  // FLAGOS_SIM_FAULT set, or armed at run time
  std::atomic<int> lost{-1};  // the kind whose KIND:N:lost fault fired; -1: not lost
  std::mutex arm_mu;
  std::string kinds;  // "malloc,host_malloc,..."
};

int kind_index(const std::string& name) {
  for (int k = 0; k < kKinds; ++k) {
    if (name == kFaultKinds[k].name) return k;
  }
  return -1;
}

// Parses "KIND:N,..." into per-kind call offsets; false (with `bad`, the entry) on error.
bool parse_faults(const std::string& spec, std::vector<uint64_t> (&out)[kKinds], std::string* bad) {
  for (size_t pos = 0; pos <= spec.size();) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (item.empty()) continue;
    size_t colon = item.find(':');
    int k = kind_index(item.substr(0, colon));
    long long n = colon == std::string::npos ? 0 : std::atoll(item.c_str() + colon + 1);
    size_t second = colon == std::string::npos ? std::string::npos : item.find(':', colon + 1);
    bool lost = second != std::string::npos && item.compare(second, std::string::npos, ":lost") == 0;
    if (k < 0 || n <= 0 || out[k].size() >= kMaxPerKind || (second != std::string::npos && !lost)) {
      *bad = item;
      return false;
    }
    // A lost device's fault is stored with the top bit set (call numbers never reach it).
    out[k].push_back(static_cast<uint64_t>(n) | (lost ? kLostBit : 0));
  }
  return true;
}

Faults* load_faults() {
  auto* f = new Faults;  // never freed: consulted until the process exits
  for (int& k : f->kind_of) k = -1;
  for (int k = 0; k < kKinds; ++k) {
    for (Op op : kFaultKinds[k].ops) f->kind_of[static_cast<int>(op)] = k;
    for (auto& a : f->at[k]) a.store(0);
    f->calls[k].store(0);
    f->kinds += (k ? "," : "") + std::string(kFaultKinds[k].name);
  }
  const char* text = std::getenv("FLAGOS_SIM_FAULT");
  std::string spec(text ? text : "");
  // Each entry on its own, so that one bad entry leaves the others armed.
  for (size_t pos = 0; pos <= spec.size();) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (item.empty()) continue;
    std::vector<uint64_t> at[kKinds];
    std::string bad;
    int k = kind_index(item.substr(0, item.find(':')));
    if (!parse_faults(item, at, &bad)) {
      warn("ignoring FLAGOS_SIM_FAULT entry '" + item + "' (expected KIND:N, KIND one of " + f->kinds + ")");
      continue;
    }
    for (auto& slot : f->at[k]) {
      if (slot.load() == 0) {
        slot.store(at[k][0]);
        break;
      }
    }
    f->counting.store(true);
  }
  return f;
}

Faults* const g_faults = load_faults();

Status arm_faults(const char* text) {
  std::vector<uint64_t> at[kKinds];
  std::string bad;
  if (!parse_faults(text ? text : "", at, &bad)) {
    return kit::fail(FLAGOS_ERROR_INVALID_VALUE,
                     "arm: bad fault entry '%s' (expected KIND:N or KIND:N:lost with N >= 1, at most %d per kind, KIND "
                     "one of %s)", bad.c_str(), kMaxPerKind, g_faults->kinds.c_str());
  }
  std::lock_guard<std::mutex> lock(g_faults->arm_mu);
  g_faults->counting.store(true);
  g_faults->lost.store(-1);  // arming resets a lost device, as a device reset would
  for (int k = 0; k < kKinds; ++k) {
    uint64_t base = g_faults->calls[k].load();
    for (int i = 0; i < kMaxPerKind; ++i) {
      uint64_t a = i < static_cast<int>(at[k].size()) ? at[k][i] : 0;
      g_faults->at[k][i].store(a ? (base + (a & ~kLostBit)) | (a & kLostBit) : 0);
    }
  }
  return FLAGOS_SUCCESS;
}

Status fault_calls(const char* kind, uint64_t* count) {
  int k = kind ? kind_index(kind) : -1;
  if (k < 0 || !count) {
    return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "calls: unknown fault kind '%s' (one of %s)",
                     kind ? kind : "(null)", g_faults->kinds.c_str());
  }
  *count = g_faults->calls[k].load();
  return FLAGOS_SUCCESS;
}

}  // namespace

const Config& config() { return g_config; }

std::atomic<uint64_t> g_live_streams{0}, g_live_events{0};

namespace {
Status live_objects(uint64_t* streams, uint64_t* events) {
  if (!streams || !events) return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "live: NULL output");
  *streams = g_live_streams.load();
  *events = g_live_events.load();
  return FLAGOS_SUCCESS;
}
}  // namespace

const flagos_hal_sim_control_t* test_control() {
  static const flagos_hal_sim_control_t control = {sizeof(flagos_hal_sim_control_t), &arm_faults,
                                                   &fault_calls, g_faults->kinds.c_str(), &live_objects};
  return &control;
}

Status Sim::intercept(Op op) {
  if (!g_faults->counting.load(std::memory_order_relaxed)) return FLAGOS_SUCCESS;
  int k = g_faults->kind_of[static_cast<int>(op)];
  if (k < 0) return FLAGOS_SUCCESS;
  uint64_t n = ++g_faults->calls[k];
  int lost = g_faults->lost.load(std::memory_order_relaxed);
  if (lost >= 0) {
    return kit::fail(FLAGOS_ERROR_DEVICE_FAULT,
                     "%s: the device is lost after an injected fault of %s (FLAGOS_SIM_FAULT "
                     "%s:N:lost); every call fails until it is reset", kit::op_name(op),
                     kFaultKinds[lost].name, kFaultKinds[lost].name);
  }
  for (auto& slot : g_faults->at[k]) {
    uint64_t at = slot.load(std::memory_order_relaxed);
    if ((at & ~kLostBit) != n || at == 0) continue;
    if (at & kLostBit) {
      g_faults->lost.store(k);
      return kit::fail(FLAGOS_ERROR_DEVICE_FAULT,
                       "%s: injected fault (FLAGOS_SIM_FAULT), the device is lost", kit::op_name(op));
    }
    return kit::fail(kFaultKinds[k].status, "%s: injected fault (FLAGOS_SIM_FAULT)", kit::op_name(op));
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

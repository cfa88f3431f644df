// The clock of the per-op routing statistics, read twice on every routed call: the
// x86-64 time-stamp counter (invariant on every CPU torch supports there) costs about a
// third of a vDSO steady_clock read, which is a measurable share of a small op. Ticks are
// converted to nanoseconds only when the statistics are read. Elsewhere: steady_clock.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#include <x86intrin.h>
#define FLAGOS_OP_CLOCK_TSC 1
#endif

namespace flagos {
namespace op_clock {

inline uint64_t now() {
#ifdef FLAGOS_OP_CLOCK_TSC
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

// Nanoseconds per tick, measured against steady_clock since the library loaded.
double ns_per_tick();

}  // namespace op_clock
}  // namespace flagos

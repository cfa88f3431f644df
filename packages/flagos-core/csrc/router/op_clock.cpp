#include "router/op_clock.h"

#include <thread>

namespace flagos {
namespace op_clock {
namespace {

struct Origin {
  uint64_t ticks = now();
  std::chrono::steady_clock::time_point time = std::chrono::steady_clock::now();
};
const Origin g_origin;  // at load

}  // namespace

double ns_per_tick() {
#ifdef FLAGOS_OP_CLOCK_TSC
  // The rate over the whole time since load; at least 2 ms of it, for three digits.
  auto min_span = std::chrono::milliseconds(2);
  auto span = std::chrono::steady_clock::now() - g_origin.time;
  if (span < min_span) std::this_thread::sleep_for(min_span - span);
  uint64_t ticks = now();
  auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() -
                                                     g_origin.time).count();
  return ticks > g_origin.ticks ? ns / double(ticks - g_origin.ticks) : 0.0;
#else
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::duration(1)).count();
#endif
}

}  // namespace op_clock
}  // namespace flagos

// flagos HAL kit: the thread-local last-error message every HAL function leaves behind.
//
// Part of the header-only HAL kit (kit.hpp). Everything here has internal linkage per HAL
// library (the library is built with hidden visibility), so two HALs built with the kit
// never share an error slot.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <utility>

#include "flagos_hal/flagos_hal.h"

namespace flagos_hal {
namespace kit {

using Status = flagos_status_t;

// This thread's last error message ("" until a call fails on this thread).
inline std::string& last_error() {
  thread_local std::string message;
  return message;
}

// Records `message` as this thread's last error and returns `status`.
inline Status fail_text(Status status, std::string message) {
  last_error() = std::move(message);
  return status;
}

// printf-style fail_text: `return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "malloc: %s", why);`
inline Status fail(Status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
inline Status fail(Status status, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return fail_text(status, buf);
}

// A runtime's error codes by the flagos status each means; any other code is UNKNOWN.
//   static const kit::ErrorMap kMap = {{FLAGOS_ERROR_OUT_OF_MEMORY, {2}}, ...};
//   return kMap(code);
class ErrorMap {
 public:
  ErrorMap(std::initializer_list<std::pair<Status, std::initializer_list<long>>> groups) {
    for (const auto& g : groups) {
      for (long code : g.second) map_[code] = g.first;
    }
  }
  Status operator()(long code) const {
    auto it = map_.find(code);
    return it == map_.end() ? FLAGOS_ERROR_UNKNOWN : it->second;
  }

 private:
  std::unordered_map<long, Status> map_;
};

}  // namespace kit
}  // namespace flagos_hal

// Returns from the calling function when `expr` (a flagos_status_t) is not SUCCESS.
#define FLAGOS_KIT_TRY(expr)                                         \
  do {                                                               \
    ::flagos_status_t flagos_kit_st_ = (expr);                       \
    if (flagos_kit_st_ != FLAGOS_SUCCESS) return flagos_kit_st_;     \
  } while (0)

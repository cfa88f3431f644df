// Header-only C++ loader for flagos HAL libraries.
//
// Opens a HAL shared library at run time with RTLD_LOCAL (so several HALs, even two
// copies of the same one, coexist), fetches its function table through the one
// exported entry symbol and checks the ABI. Errors are std::runtime_error whose
// message names the library and, for ABI problems, the expected and found versions.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "flagos_hal/flagos_hal.h"

namespace flagos_hal {

struct Library {
  std::string path;                         // what was opened
  std::string name;                         // the HAL's own name ("sim", "cuda", ...)
  void* handle = nullptr;                   // dlopen handle; libraries stay open for the process
  const flagos_hal_table_t* table = nullptr;
};

inline std::string version_string(uint32_t v) {
  return std::to_string(v >> 16) + "." + std::to_string(v & 0xffffu);
}

// "OUT_OF_MEMORY: <vendor text>: <thread detail>" for a failed call of `table`.
inline std::string describe_status(const flagos_hal_table_t* table, flagos_status_t status) {
  std::string out = "flagos HAL error " + std::to_string(static_cast<int>(status));
  const char* text = nullptr;
  if (table && table->get_error_string && table->get_error_string(status, &text) == FLAGOS_SUCCESS &&
      text) {
    out += " (" + std::string(text) + ")";
  }
  const char* detail = nullptr;
  if (table && table->get_last_error_message &&
      table->get_last_error_message(&detail) == FLAGOS_SUCCESS && detail && *detail) {
    out += ": " + std::string(detail);
  }
  return out;
}

inline Library open_library(const std::string& path) {
  Library lib;
  lib.path = path;
  dlerror();
  lib.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib.handle) {
    const char* err = dlerror();
    throw std::runtime_error("flagos: cannot open HAL library '" + path + "': " +
                             (err ? err : "unknown dlopen error"));
  }
  auto entry = reinterpret_cast<flagos_hal_get_table_fn>(dlsym(lib.handle, FLAGOS_HAL_ENTRY_SYMBOL));
  if (!entry) {
    throw std::runtime_error("flagos: '" + path + "' is not a flagos HAL: it does not export " +
                             FLAGOS_HAL_ENTRY_SYMBOL);
  }
  const flagos_hal_table_t* table = nullptr;
  flagos_status_t st = entry(FLAGOS_HAL_ABI_MAJOR, &table);
  if (st == FLAGOS_ERROR_VERSION_MISMATCH || (st == FLAGOS_SUCCESS && table &&
                                              (table->abi_version >> 16) != FLAGOS_HAL_ABI_MAJOR)) {
    throw std::runtime_error(
        "flagos: HAL library '" + path + "' has an incompatible ABI: expected " +
        version_string(FLAGOS_HAL_ABI_VERSION) + " (major " + std::to_string(FLAGOS_HAL_ABI_MAJOR) +
        "), found " + (table ? version_string(table->abi_version) : std::string("a HAL refusing major ") +
                                                                       std::to_string(FLAGOS_HAL_ABI_MAJOR)) +
        ". Rebuild the HAL against this flagos-hal, or install a matching flagos-hal.");
  }
  if (st != FLAGOS_SUCCESS || !table) {
    throw std::runtime_error("flagos: HAL library '" + path + "' failed to hand out its table: " +
                             describe_status(table, st));
  }
  // The fields up to event_elapsed_time form ABI 1.0; a smaller table is a broken vendor build.
  if (table->struct_size < offsetof(flagos_hal_table_t, event_elapsed_time) + sizeof(void*)) {
    throw std::runtime_error("flagos: HAL library '" + path + "' has a truncated function table (" +
                             std::to_string(table->struct_size) + " bytes, ABI 1.0 needs " +
                             std::to_string(offsetof(flagos_hal_table_t, event_elapsed_time) +
                                            sizeof(void*)) +
                             ")");
  }
  lib.table = table;
  const char* name = nullptr;
  if (table->get_name && table->get_name(&name) == FLAGOS_SUCCESS && name) lib.name = name;
  else lib.name = path;
  return lib;
}

}  // namespace flagos_hal

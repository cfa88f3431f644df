// A vendor kernel library opened at run time: its ABI version checked through the
// manifest's version symbol, its kernels resolved by name with dlsym.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "flagos_native/kernel_abi.h"

namespace flagos_native {

struct Library {
  std::string path;
  void* handle = nullptr;  // never closed: bound kernels may be queued until exit
  uint32_t version = 0;    // (major << 16 | minor), as the library reports it
  flagos_native_error_fn last_error = nullptr;  // optional

  // The library's text for its last failure on this thread, or "".
  std::string error_text() const;
};

// Opens `path` (RTLD_LOCAL), calls `version_symbol` and checks min <= version < max_excl.
// `version_style`: "uint32" (uint32_t f(void), major << 16 | minor) or "library_property"
// (int f(int type, int* value), type 0 major and 1 minor, as NVIDIA's libraries have it).
// Throws std::runtime_error naming the library and what is wrong.
std::shared_ptr<Library> open_library(const std::string& path, const std::string& version_symbol,
                                      uint32_t min_version, uint32_t max_version_exclusive,
                                      const std::string& error_symbol,
                                      const std::string& version_style = "uint32");

// The address of `name` in the library, or nullptr.
void* find_symbol(const Library& lib, const std::string& name);

std::string version_text(uint32_t v);

}  // namespace flagos_native

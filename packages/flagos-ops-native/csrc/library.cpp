#include "library.h"

#include <dlfcn.h>

#include <stdexcept>

namespace flagos_native {

std::string version_text(uint32_t v) {
  return std::to_string(v >> 16) + "." + std::to_string(v & 0xffffu);
}

std::string Library::error_text() const {
  if (!last_error) return "";
  const char* text = last_error();
  return text ? text : "";
}

std::shared_ptr<Library> open_library(const std::string& path, const std::string& version_symbol,
                                      uint32_t min_version, uint32_t max_version_exclusive,
                                      const std::string& error_symbol,
                                      const std::string& version_style) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    throw std::runtime_error("cannot open '" + path + "': " + (err ? err : "unknown dlopen error"));
  }
  auto lib = std::make_shared<Library>();
  lib->path = path;
  lib->handle = handle;
  void* version = dlsym(handle, version_symbol.c_str());
  if (!version) {
    throw std::runtime_error("'" + path + "' does not export the version symbol '" +
                             version_symbol + "'");
  }
  if (version_style == "library_property") {
    using Property = int (*)(int type, int* value);
    int major = 0, minor = 0;
    auto get = reinterpret_cast<Property>(version);
    if (get(0, &major) != 0 || get(1, &minor) != 0) {
      throw std::runtime_error("'" + path + "': " + version_symbol + " failed");
    }
    lib->version = uint32_t(major) << 16 | uint32_t(minor);
  } else {
    lib->version = reinterpret_cast<flagos_native_version_fn>(version)();
  }
  if (lib->version < min_version || lib->version >= max_version_exclusive) {
    throw std::runtime_error("'" + path + "' reports ABI version " + version_text(lib->version) +
                             " (" + version_symbol + "); the manifest accepts >=" +
                             version_text(min_version) + ",<" +
                             version_text(max_version_exclusive));
  }
  if (!error_symbol.empty()) {
    lib->last_error = reinterpret_cast<flagos_native_error_fn>(dlsym(handle, error_symbol.c_str()));
    if (!lib->last_error) {
      throw std::runtime_error("'" + path + "' does not export the error symbol '" +
                               error_symbol + "'");
    }
  }
  return lib;
}

void* find_symbol(const Library& lib, const std::string& name) {
  return dlsym(lib.handle, name.c_str());
}

}  // namespace flagos_native

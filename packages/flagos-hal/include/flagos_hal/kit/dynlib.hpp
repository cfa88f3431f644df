// flagos HAL kit: opening a vendor runtime at run time (dlopen) and resolving its entry
// points (dlsym), so a HAL builds without the vendor SDK and loads, reporting no device,
// on machines without the driver.
//
//   kit::RuntimeLibrary lib;
//   if (!lib.open("libcuda.so.1")) return kit::fail(FLAGOS_ERROR_NO_DEVICE, "%s", lib.error().c_str());
//   lib.resolve(cuInit, "cuInit");                            // required
//   lib.resolve_any(cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
//   lib.resolve_optional(cuGetErrorName, "cuGetErrorName");    // may stay NULL
//   if (!lib.missing().empty()) ...                            // "cuInit, cuFoo"
#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <string>

namespace flagos_hal {
namespace kit {

class RuntimeLibrary {
 public:
  // dlopen(RTLD_NOW | RTLD_LOCAL); false (and error()) when it cannot be opened.
  bool open(const char* soname) {
    dlerror();
    handle_ = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      const char* e = dlerror();
      error_ = std::string(soname) + " not found: " + (e ? e : "dlopen failed");
    }
    return handle_ != nullptr;
  }
  // Sets `slot` to the symbol; a missing one is added to missing().
  template <typename F>
  bool resolve(F& slot, const char* name) {
    if (resolve_optional(slot, name)) return true;
    missing_ += (missing_.empty() ? "" : ", ") + std::string(name);
    return false;
  }
  // The first of `names` the library exports (versioned names first: "cuFoo_v2", "cuFoo").
  template <typename F>
  bool resolve_any(F& slot, std::initializer_list<const char*> names) {
    for (const char* n : names) {
      if (resolve_optional(slot, n)) return true;
    }
    missing_ += (missing_.empty() ? "" : ", ") + std::string(*names.begin());
    return false;
  }
  template <typename F>
  bool resolve_optional(F& slot, const char* name) {
    slot = handle_ ? reinterpret_cast<F>(dlsym(handle_, name)) : nullptr;
    return slot != nullptr;
  }
  void* handle() const { return handle_; }
  const std::string& error() const { return error_; }
  const std::string& missing() const { return missing_; }  // "" when every symbol resolved

 private:
  void* handle_ = nullptr;  // never closed: HAL calls may come until the process exits
  std::string error_;
  std::string missing_;
};

}  // namespace kit
}  // namespace flagos_hal

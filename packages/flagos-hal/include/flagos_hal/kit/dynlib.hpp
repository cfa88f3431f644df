// flagos HAL kit: opening a vendor runtime at run time (dlopen) and resolving its entry
// points (dlsym), so a HAL builds without the vendor SDK and loads, reporting no device,
// on machines without the driver.
//
//   static kit::RuntimeLibrary lib;                       // in the vendor's open()
//   FLAGOS_KIT_TRY(lib.open("libcuda.so.1", "no NVIDIA driver on this machine?"));
//   lib.resolve(cuInit, "cuInit");                        // required
//   lib.resolve_any(cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
//   lib.resolve_optional(cuGetErrorName, "cuGetErrorName");  // may stay NULL
//   FLAGOS_KIT_TRY(lib.complete("an NVIDIA driver"));     // NO_DEVICE naming what is missing
#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <string>

#include "flagos_hal/kit/errors.hpp"

namespace flagos_hal {
namespace kit {

class RuntimeLibrary {
 public:
  // dlopen(RTLD_NOW | RTLD_LOCAL); NO_DEVICE "<soname> not found: <dlerror> (<hint>)" when
  // it cannot be opened.
  Status open(const char* soname, const char* hint) {
    dlerror();
    soname_ = soname;
    if ((handle_ = dlopen(soname, RTLD_NOW | RTLD_LOCAL))) return FLAGOS_SUCCESS;
    const char* e = dlerror();
    return fail(FLAGOS_ERROR_NO_DEVICE, "%s not found: %s (%s)", soname, e ? e : "dlopen failed", hint);
  }
  // NO_DEVICE "<soname> is too old or not <what>: missing a, b" when a required symbol is
  // missing, else SUCCESS.
  Status complete(const char* what) const {
    if (missing_.empty()) return FLAGOS_SUCCESS;
    return fail(FLAGOS_ERROR_NO_DEVICE, "%s is too old or not %s: missing %s", soname_.c_str(), what,
                missing_.c_str());
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
  const std::string& missing() const { return missing_; }  // "" when every symbol resolved

 private:
  void* handle_ = nullptr;  // never closed: HAL calls may come until the process exits
  std::string soname_;
  std::string missing_;
};

}  // namespace kit
}  // namespace flagos_hal

#include "engines/launch/twin_launchers.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>

namespace flagos {
namespace {

// The CUDA driver, opened only where the process has loaded it already (torch's CUDA).
struct CudaDriver {
  using LaunchKernel = int (*)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared, void* stream,
                               void** params, void** extra);
  using CtxGetCurrent = int (*)(void** ctx);
  using GetErrorString = int (*)(int error, const char** text);
  LaunchKernel launch = nullptr;
  CtxGetCurrent ctx_get_current = nullptr;
  GetErrorString error_string = nullptr;

  static const CudaDriver& get() {
    static const CudaDriver d = [] {
      CudaDriver d;
      void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
      if (!lib) return d;
      d.launch = reinterpret_cast<LaunchKernel>(dlsym(lib, "cuLaunchKernel"));
      d.ctx_get_current = reinterpret_cast<CtxGetCurrent>(dlsym(lib, "cuCtxGetCurrent"));
      d.error_string = reinterpret_cast<GetErrorString>(dlsym(lib, "cuGetErrorString"));
      return d;
    }();
    return d;
  }
};

using HostFunction = void (*)(const uint32_t* grid, void** params);

}  // namespace

bool twin_can_launch(c10::Device device) {
  if (device.is_cpu()) return true;
  if (!device.is_cuda()) return false;
  const auto& d = CudaDriver::get();
  void* ctx = nullptr;
  return d.launch && d.ctx_get_current && d.ctx_get_current(&ctx) == 0 && ctx;
}

std::string twin_launch(const CompiledLaunch& l, c10::Device device, void** params) {
  if (l.grid[0] == 0 || l.grid[1] == 0 || l.grid[2] == 0) return {};
  if (device.is_cpu()) {
    reinterpret_cast<HostFunction>(l.function)(l.grid, params);
    return {};
  }
  const auto* impl = c10::impl::getDeviceGuardImpl(device.type());
  void* stream = impl->getStreamNativeHandle(impl->getStream(device));
  const auto& d = CudaDriver::get();
  int st = d.launch(reinterpret_cast<void*>(l.function), l.grid[0], l.grid[1], l.grid[2],
                    l.block_threads, 1, 1, l.shared_bytes, stream, params, nullptr);
  if (st == 0) return {};
  const char* text = "unknown error";
  if (d.error_string) d.error_string(st, &text);
  return "cuLaunchKernel: " + std::to_string(st) + ", " + text;
}

}  // namespace flagos

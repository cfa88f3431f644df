// The CUDA HAL: the driver (opened at run time), its errors, devices and their primary
// contexts, and the exported entry point.
#include <cstdio>
#include <mutex>

#include "cuda.hpp"
#include "flagos_hal/kit/dynlib.hpp"

namespace flagos_cuda {

Driver driver;

namespace {

struct DeviceState {
  CUdevice dev = 0;
  std::atomic<CUcontext> primary{nullptr};
  std::mutex mu;
};
DeviceState* g_devices = nullptr;  // [device count], never freed
int g_driver_version = 0;          // e.g. 13000

// CUresult codes (cuda.h) by the flagos status they mean.
const kit::ErrorMap map_cu = {
    // invalid value; an image that is invalid, for no GPU of this kind, of bad PTX or of
    // an unsupported PTX version, an invalid source, a kernel not found; a launch that
    // needs more resources than a block has
    {FLAGOS_ERROR_INVALID_VALUE, {1, 200, 209, 218, 222, 300, 500, 701,
                                  // illegal state; stream capture: unsupported, invalidated,
                                  // merge, unmatched, unjoined, isolation, implicit,
                                  // captured event, wrong thread
                                  401, 900, 901, 902, 903, 904, 905, 906, 907, 908}},
    {FLAGOS_ERROR_OUT_OF_MEMORY, {2}},
    // not initialized, deinitialized, stub library, device unavailable, no device,
    // system not ready, driver mismatch, compat not supported on device
    {FLAGOS_ERROR_NO_DEVICE, {3, 4, 34, 46, 100, 802, 803, 804}},
    {FLAGOS_ERROR_INVALID_DEVICE, {101}},
    {FLAGOS_ERROR_INVALID_HANDLE, {400}},
    {FLAGOS_ERROR_NOT_READY, {600}},
    // ECC, NVLink, illegal address, launch timeout, assert, hardware stack, illegal
    // instruction, misaligned, address space, PC, launch failed, external device
    {FLAGOS_ERROR_DEVICE_FAULT, {214, 220, 700, 702, 710, 714, 715, 716, 717, 718, 719, 911}},
    {FLAGOS_ERROR_NOT_SUPPORTED, {800, 801}},
};

// "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"
std::string cu_text(CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver.cuGetErrorName && driver.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
  if (driver.cuGetErrorString && driver.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
  return std::string(name ? name : "CUresult") + " (" + std::to_string(r) + "): " +
         (text ? text : "unrecognized CUDA error code");
}

}  // namespace

Status cu_fail(CUresult r, const char* fn, const std::string& what) {
  kit::fail_text(FLAGOS_SUCCESS, std::string(fn) + " failed: " + cu_text(r) + (what.empty() ? "" : " (" + what + ")"));
  return map_cu(r);
}

Status Cuda::open(int* device_count) {
  static kit::RuntimeLibrary lib;
  FLAGOS_KIT_TRY(lib.open("libcuda.so.1", "no NVIDIA driver on this machine?"));
#define FLAGOS_CUDA_RESOLVE(name, params) lib.resolve(driver.name, #name);
  FLAGOS_CUDA_DRIVER(FLAGOS_CUDA_RESOLVE)
#undef FLAGOS_CUDA_RESOLVE
  lib.resolve_any(driver.cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
  lib.resolve_optional(driver.cuGetErrorName, "cuGetErrorName");
  lib.resolve_optional(driver.cuFuncGetParamInfo, "cuFuncGetParamInfo");
  lib.resolve_optional(driver.cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode");
  lib.resolve_optional(driver.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled");
  FLAGOS_KIT_TRY(lib.complete("an NVIDIA driver"));
  if (driver.cuDriverGetVersion(&g_driver_version) != CUDA_SUCCESS) g_driver_version = 0;
  CUresult r = driver.cuInit(0);
  if (r != CUDA_SUCCESS) return kit::fail(FLAGOS_ERROR_NO_DEVICE, "cuInit failed: %s", cu_text(r).c_str());
  int n = 0;
  if ((r = driver.cuDeviceGetCount(&n)) != CUDA_SUCCESS) {
    return kit::fail(FLAGOS_ERROR_NO_DEVICE, "cuDeviceGetCount failed: %s", cu_text(r).c_str());
  }
  g_devices = new DeviceState[n > 0 ? n : 1];
  for (int i = 0; i < n; ++i) {
    if ((r = driver.cuDeviceGet(&g_devices[i].dev, i)) != CUDA_SUCCESS) {
      return kit::fail(FLAGOS_ERROR_NO_DEVICE, "cuDeviceGet(%d) failed: %s", i, cu_text(r).c_str());
    }
  }
  *device_count = n;
  return FLAGOS_SUCCESS;
}

std::string Cuda::version() {
  std::string v = "flagos cuda HAL (ABI " + std::to_string(FLAGOS_HAL_ABI_MAJOR) + "." +
                  std::to_string(FLAGOS_HAL_ABI_MINOR) + ", CUDA driver API via libcuda.so.1)";
  if (g_driver_version > 0) {
    v += "; CUDA driver " + std::to_string(g_driver_version / 1000) + "." +
         std::to_string((g_driver_version % 1000) / 10) + " (" + std::to_string(g_driver_version) + ")";
  }
  return v;
}

// No context is needed (nor created) for these queries.
Status Cuda::properties(int device, flagos_device_properties_t* p) {
  CUdevice dev = g_devices[device].dev;
  CU_CALL(cuDeviceGetName, p->name, static_cast<int>(sizeof p->name), dev);
  size_t total = 0;
  CU_CALL(cuDeviceTotalMem_v2, &total, dev);
  p->total_memory = total;
  CU_CALL(cuDeviceGetAttribute, &p->compute_units, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  CU_CALL(cuDeviceGetAttribute, &p->major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  CU_CALL(cuDeviceGetAttribute, &p->minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  p->native_device_index = device;  // HAL index == CUDA ordinal
  return FLAGOS_SUCCESS;
}

// As cudaSetDevice: the primary context becomes current, but only once it exists (the
// first call that needs it creates it), so selecting a device costs no GPU memory.
Status Cuda::set_device(int device) {
  return g_devices[device].primary.load(std::memory_order_acquire) ? activate(device) : FLAGOS_SUCCESS;
}

// Also waits for torch.cuda's work on the device (same primary context).
Status Cuda::device_synchronize(int) {
  CU_CALL(cuCtxSynchronize);
  return FLAGOS_SUCCESS;
}

Status primary_ctx(int device, CUcontext* out) {
  DeviceState& ds = g_devices[device];
  if ((*out = ds.primary.load(std::memory_order_acquire))) return FLAGOS_SUCCESS;
  std::lock_guard<std::mutex> lock(ds.mu);
  if ((*out = ds.primary.load(std::memory_order_acquire))) return FLAGOS_SUCCESS;
  CUresult r = driver.cuDevicePrimaryCtxRetain(out, ds.dev);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuDevicePrimaryCtxRetain", "device " + std::to_string(device));
  ds.primary.store(*out, std::memory_order_release);
  return FLAGOS_SUCCESS;
}

// cuCtxGetCurrent is a thread-local read inside the driver, so it is the per-thread cache:
// cuCtxSetCurrent runs only when something else (e.g. torch.cuda) switched contexts.
Status Cuda::activate(int device) {
  CUcontext want = nullptr, cur = nullptr;
  FLAGOS_KIT_TRY(primary_ctx(device, &want));
  if (driver.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == want) return FLAGOS_SUCCESS;
  CU_CALL(cuCtxSetCurrent, want);
  return FLAGOS_SUCCESS;
}

Status use_any_context() {
  CUcontext cur = nullptr;
  if (driver.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur) return FLAGOS_SUCCESS;
  return Cuda::activate(Kit::current_device());
}

}  // namespace flagos_cuda

FLAGOS_HAL_KIT_ENTRY(flagos_cuda::Cuda)

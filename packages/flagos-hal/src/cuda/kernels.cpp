// The CUDA HAL's kernel extension (flagos_hal.h "kernel extension") over the driver API:
// images of the formats cubin, ptx (JIT-compiled by the driver for the device) and fatbin
// are loaded into the device's primary context with cuModuleLoadData; launches are
// cuLaunchKernel on the stream. The device's target is what Triton's CUDA backend compiles
// for: backend "cuda", the compute capability as "90".
#include <cstdio>
#include <cstring>
#include <string>

#include "cuda.hpp"

namespace flagos_cuda {

const char* Cuda::kernel_formats() { return "cubin,ptx,fatbin"; }

Status Cuda::kernel_target(int device, flagos_kernel_target_t* t) {
  CUdevice dev = 0;
  CU_CALL(cuDeviceGet, &dev, device);
  int major = 0, minor = 0, warp = 0, threads = 0, shared = 0;
  CU_CALL(cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  CU_CALL(cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  CU_CALL(cuDeviceGetAttribute, &warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
  CU_CALL(cuDeviceGetAttribute, &threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev);
  CU_CALL(cuDeviceGetAttribute, &shared, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
  std::snprintf(t->backend, sizeof t->backend, "%s", "cuda");
  std::snprintf(t->arch, sizeof t->arch, "%d", major * 10 + minor);
  t->warp_size = warp;
  t->max_threads_per_block = static_cast<uint32_t>(threads);
  t->max_shared_memory = static_cast<uint64_t>(shared);
  return FLAGOS_SUCCESS;
}

// The primary context of m.device is current (the kit's activate).
Status Cuda::module_load(Module& m, const char* format, const void* image, size_t size) {
  if (std::strcmp(format, "ptx") == 0) {
    // The driver reads PTX as a NUL-terminated string.
    std::string text(static_cast<const char*>(image), size);
    CUresult r = driver.cuModuleLoadData(&m.cu, text.c_str());
    if (r != CUDA_SUCCESS) return cu_fail(r, "cuModuleLoadData", "a ptx image");
    return FLAGOS_SUCCESS;
  }
  CUresult r = driver.cuModuleLoadData(&m.cu, image);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuModuleLoadData", std::string("a ") + format + " image");
  return FLAGOS_SUCCESS;
}

Status Cuda::module_get_function(Module& m, const char* name, Function& f) {
  CUresult r = driver.cuModuleGetFunction(&f.cu, m.cu, name);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuModuleGetFunction", std::string("kernel '") + name + "'");
  if (!driver.cuFuncGetParamInfo) return FLAGOS_SUCCESS;  // a driver before 12.4: not checked
  // The kernel's parameters, asked one by one until the driver says there is no more.
  for (size_t i = 0; i < 4096; ++i) {
    size_t offset = 0, bytes = 0;
    if (driver.cuFuncGetParamInfo(f.cu, i, &offset, &bytes) != CUDA_SUCCESS) break;
    f.arg_sizes.push_back(bytes);
  }
  f.num_args = static_cast<int>(f.arg_sizes.size());
  return FLAGOS_SUCCESS;
}

Status Cuda::function_set_shared_memory(Function& f, size_t bytes) {
  CU_CALL(cuFuncSetAttribute, f.cu, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(bytes));
  return FLAGOS_SUCCESS;
}

Status Cuda::launch_kernel(Function& f, const uint32_t grid[3], const uint32_t block[3], size_t shared_memory,
                           void* const* args, const size_t*, int, Stream& stream) {
  CU_CALL(cuLaunchKernel, f.cu, grid[0], grid[1], grid[2], block[0], block[1], block[2],
          static_cast<unsigned>(shared_memory), stream.cu, const_cast<void**>(args), nullptr);
  return FLAGOS_SUCCESS;
}

// A CUtensorMap as Triton's CUDA launcher makes it (its fill_tma_descriptor): dimensions
// innermost first, byte strides of the outer dimensions, element strides of 1, L2
// promotion of 128 bytes; out-of-bounds elements NaN when asked, else zero.
Status Cuda::kernel_encode_tensor_descriptor(int, const flagos_tensor_descriptor_info_t& info, void* out,
                                             size_t* size) {
  constexpr size_t kTensorMapBytes = 128;  // sizeof(CUtensorMap), 64-byte aligned
  constexpr int kInterleaveNone = 0, kL2Promotion128B = 2, kOobFillNone = 0, kOobFillNan = 1;
  if (!driver.cuTensorMapEncodeTiled) {
    return kit::fail(FLAGOS_ERROR_NOT_SUPPORTED,
                     "kernel_encode_tensor_descriptor: this CUDA driver has no cuTensorMapEncodeTiled "
                     "(CUDA 12.0 or later)");
  }
  if (*size < kTensorMapBytes) {
    *size = kTensorMapBytes;
    return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "kernel_encode_tensor_descriptor: %zu bytes needed",
                     kTensorMapBytes);
  }
  int n = info.ndim;
  unsigned long long dims[FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS], strides[FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS];
  unsigned box[FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS], element_strides[FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS];
  for (int i = 0; i < n; ++i) {
    dims[i] = info.shape[n - 1 - i];
    box[i] = info.block_shape[n - 1 - i];
    element_strides[i] = 1;
    if (i + 1 < n) strides[i] = static_cast<unsigned long long>(info.strides[n - 2 - i]) * info.element_size;
  }
  alignas(64) unsigned char map[kTensorMapBytes];
  CUresult r = driver.cuTensorMapEncodeTiled(map, info.element_type, static_cast<unsigned>(n),
                                             reinterpret_cast<void*>(static_cast<uintptr_t>(info.base)), dims,
                                             strides, box, element_strides, kInterleaveNone, info.swizzle,
                                             kL2Promotion128B, info.fill_nan ? kOobFillNan : kOobFillNone);
  if (r != CUDA_SUCCESS) {
    char what[160];
    std::snprintf(what, sizeof what, "data type %d, %d dimensions, element size %u, swizzle %d",
                  info.element_type, n, info.element_size, info.swizzle);
    return cu_fail(r, "cuTensorMapEncodeTiled", what);
  }
  std::memcpy(out, map, kTensorMapBytes);
  *size = kTensorMapBytes;
  return FLAGOS_SUCCESS;
}

// cuModuleUnload does not wait for the module's kernels: the device's queued work is
// finished first, as the ABI promises.
Status Cuda::module_unload(Module& m) {
  CU_CALL(cuCtxSynchronize);
  CU_CALL(cuModuleUnload, m.cu);
  return FLAGOS_SUCCESS;
}

}  // namespace flagos_cuda

// The CUDA HAL: allocations, copies, memsets and pointer attributes. Synchronous copies
// and memsets run on the legacy default stream of the device's primary context (PyTorch's
// default stream), so they are ordered after the work queued there.
#include <cstring>

#include "cuda.hpp"

namespace flagos_cuda {
namespace {

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// The driver refusing a size outright (INVALID_VALUE) still means "cannot be served".
Status alloc_fail(CUresult r, const char* fn, const std::string& what) {
  Status st = cu_fail(r, fn, what);
  return r == CUDA_ERROR_INVALID_VALUE ? FLAGOS_ERROR_OUT_OF_MEMORY : st;
}

}  // namespace

Status Cuda::mem_get_info(int, size_t* free_bytes, size_t* total_bytes) {
  CU_CALL(cuMemGetInfo_v2, free_bytes, total_bytes);
  return FLAGOS_SUCCESS;
}

Status Cuda::malloc(int device, size_t size, void** ptr) {
  CUdeviceptr p = 0;
  RelaxedCaptureMode relaxed;
  CUresult r = driver.cuMemAlloc_v2(&p, size);
  if (r != CUDA_SUCCESS) {
    return alloc_fail(r, "cuMemAlloc_v2", std::to_string(size) + " bytes on device " + std::to_string(device));
  }
  *ptr = reinterpret_cast<void*>(p);
  return FLAGOS_SUCCESS;
}

Status Cuda::free(int, void* ptr, size_t) {
  CU_CALL(cuMemFree_v2, dptr(ptr));
  return FLAGOS_SUCCESS;
}

// Portable: usable from every device's context.
Status Cuda::host_malloc(size_t size, void** ptr) {
  FLAGOS_KIT_TRY(use_any_context());
  RelaxedCaptureMode relaxed;
  CUresult r = driver.cuMemHostAlloc(ptr, size, CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) return alloc_fail(r, "cuMemHostAlloc", std::to_string(size) + " bytes of pinned host memory");
  return FLAGOS_SUCCESS;
}

Status Cuda::host_free(void* ptr, size_t) {
  FLAGOS_KIT_TRY(use_any_context());
  CU_CALL(cuMemFreeHost, ptr);
  return FLAGOS_SUCCESS;
}

// cuMemcpy may return before the bytes have landed (pageable host to device, device to
// device): the legacy stream is then synchronized so that the call returns complete.
Status Cuda::memcpy(void* dst, const void* src, size_t size, flagos_memcpy_kind_t kind, int dst_device,
                    int src_device) {
  if (kind == FLAGOS_MEMCPY_HOST_TO_HOST) {
    std::memmove(dst, src, size);
    return FLAGOS_SUCCESS;
  }
  if (kind == FLAGOS_MEMCPY_DEVICE_TO_DEVICE && src_device != dst_device) {
    CUcontext sctx = nullptr, dctx = nullptr;
    FLAGOS_KIT_TRY(primary_ctx(src_device, &sctx));
    FLAGOS_KIT_TRY(primary_ctx(dst_device, &dctx));
    FLAGOS_KIT_TRY(Cuda::activate(src_device));
    // Serialized with the pending work of both contexts (driver API contract).
    CU_CALL(cuMemcpyPeer, dptr(dst), dctx, dptr(src), sctx, size);
    CU_CALL(cuStreamSynchronize, nullptr);
    FLAGOS_KIT_TRY(Cuda::activate(dst_device));
    CU_CALL(cuStreamSynchronize, nullptr);
    return FLAGOS_SUCCESS;
  }
  CU_CALL(cuMemcpy, dptr(dst), dptr(src), size);
  if (kind != FLAGOS_MEMCPY_DEVICE_TO_HOST) CU_CALL(cuStreamSynchronize, nullptr);
  return FLAGOS_SUCCESS;
}

Status Cuda::memset(void* ptr, int value, size_t size, int) {
  CU_CALL(cuMemsetD8_v2, dptr(ptr), static_cast<unsigned char>(value), size);
  CU_CALL(cuStreamSynchronize, nullptr);
  return FLAGOS_SUCCESS;
}

// The driver works out the direction from the unified address space.
Status Cuda::memcpy_async(void* dst, const void* src, size_t size, flagos_memcpy_kind_t, Stream& s) {
  CU_CALL(cuMemcpyAsync, dptr(dst), dptr(src), size, s.cu);
  return FLAGOS_SUCCESS;
}

Status Cuda::memset_async(void* ptr, int value, size_t size, Stream& s) {
  CU_CALL(cuMemsetD8Async, dptr(ptr), static_cast<unsigned char>(value), size, s.cu);
  return FLAGOS_SUCCESS;
}

// The driver knows every pointer of the process's CUDA address space, torch.cuda's too.
// cuPointerGetAttributes leaves unknown memory at the defaults (memory type 0); should a
// driver refuse the batch, one attribute at a time, where an error means "not CUDA memory".
Status Cuda::pointer_attributes(const void* ptr, flagos_pointer_attributes_t* out) {
  if (use_any_context() != FLAGOS_SUCCESS) return FLAGOS_SUCCESS;  // stays UNKNOWN
  unsigned memtype = 0;
  int ordinal = -1;
  CUdeviceptr start = 0;
  size_t range = 0;
  int attrs[4] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[4] = {&memtype, &ordinal, &start, &range};
  if (driver.cuPointerGetAttributes(4, attrs, data, dptr(ptr)) != CUDA_SUCCESS) {
    for (int i = 0; i < 4; ++i) {
      if (driver.cuPointerGetAttribute(data[i], attrs[i], dptr(ptr)) != CUDA_SUCCESS) {
        if (i == 0) return FLAGOS_SUCCESS;  // not CUDA memory
        if (i == 1) ordinal = -1;
        if (i >= 2) start = 0, range = 0;
      }
    }
  }
  if (memtype == CU_MEMORYTYPE_DEVICE || memtype == CU_MEMORYTYPE_UNIFIED) {
    out->type = FLAGOS_POINTER_DEVICE;
    out->device = ordinal >= 0 && ordinal < Kit::device_count() ? ordinal : -1;
  } else if (memtype == CU_MEMORYTYPE_HOST) {
    out->type = FLAGOS_POINTER_PINNED_HOST;
  } else {
    return FLAGOS_SUCCESS;  // unregistered host memory, or anything else: unknown
  }
  if (start != 0 && range != 0 && dptr(ptr) >= start && dptr(ptr) - start < range) {
    out->base = reinterpret_cast<void*>(start);
    out->size = range;
  }
  return FLAGOS_SUCCESS;
}

}  // namespace flagos_cuda

// flagos CUDA HAL: the HAL kit (flagos_hal/kit/kit.hpp) over the CUDA *driver* API.
//   device.cpp  the driver (opened at run time), errors, devices and contexts, the entry
//   memory.cpp  allocations, copies, memsets, pointer attributes
//   stream.cpp  streams (CUstreams) and events (a CUevent per device)
//   kernels.cpp the kernel extension: modules (cubin, PTX, fatbin) and kernel launches
//   capture.cpp the stream capture: CUDA stream capture into a CUgraph, launched as a CUgraphExec
//
// Built without the CUDA toolkit: libcuda.so.1 is opened with dlopen and every entry
// point resolved with dlsym, so the library loads (and reports zero devices) on machines
// without an NVIDIA driver. All work happens in each device's *primary* context, the one
// the CUDA runtime (and so PyTorch) uses, so pointers, streams and events interoperate
// with torch.cuda. See docs/hal/cuda.md.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "flagos_hal/kit/kit.hpp"

namespace flagos_cuda {

namespace kit = flagos_hal::kit;
using kit::Status;

// The driver API types and constants used here, with their cuda.h values (ABI: they never
// change between releases; checked against cuda.h of CUDA 11.6 and later).
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;  // 64-bit on LP64 (cuda.h: CUdeviceptr_v2)
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;
constexpr CUresult CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_NOT_READY = 600;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;        // unsigned int (CUmemorytype)
constexpr int CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;     // int
constexpr int CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11;  // CUdeviceptr
constexpr int CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12;        // size_t
constexpr unsigned CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2, CU_MEMORYTYPE_UNIFIED = 4;
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1, CU_MEMHOSTALLOC_PORTABLE = 0x1;
constexpr unsigned CU_EVENT_BLOCKING_SYNC = 0x1, CU_EVENT_DISABLE_TIMING = 0x2;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
constexpr int CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr int CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;  // CUstreamCaptureMode
constexpr int CU_STREAM_CAPTURE_MODE_RELAXED = 2;

// Every driver entry point: X(name, parameter list). Versioned names are the ones cuda.h
// maps to; the legacy-default-stream variants, never _ptds/_ptsz.
#define FLAGOS_CUDA_DRIVER(X)                                              \
  X(cuInit, (unsigned))                                                    \
  X(cuDriverGetVersion, (int*))                                            \
  X(cuGetErrorString, (CUresult, const char**))                           \
  X(cuDeviceGetCount, (int*))                                              \
  X(cuDeviceGet, (CUdevice*, int))                                         \
  X(cuDeviceGetName, (char*, int, CUdevice))                              \
  X(cuDeviceGetAttribute, (int*, int, CUdevice))                          \
  X(cuDeviceTotalMem_v2, (size_t*, CUdevice))                             \
  X(cuDevicePrimaryCtxRetain, (CUcontext*, CUdevice))                     \
  X(cuCtxSetCurrent, (CUcontext))                                          \
  X(cuCtxGetCurrent, (CUcontext*))                                         \
  X(cuCtxSynchronize, ())                                                  \
  X(cuCtxGetStreamPriorityRange, (int*, int*))                            \
  X(cuMemGetInfo_v2, (size_t*, size_t*))                                  \
  X(cuMemAlloc_v2, (CUdeviceptr*, size_t))                                \
  X(cuMemFree_v2, (CUdeviceptr))                                           \
  X(cuMemHostAlloc, (void**, size_t, unsigned))                           \
  X(cuMemFreeHost, (void*))                                                \
  X(cuMemcpy, (CUdeviceptr, CUdeviceptr, size_t))                         \
  X(cuMemcpyPeer, (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t)) \
  X(cuMemcpyAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))          \
  X(cuMemsetD8_v2, (CUdeviceptr, unsigned char, size_t))                  \
  X(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))      \
  X(cuPointerGetAttribute, (void*, int, CUdeviceptr))                     \
  X(cuPointerGetAttributes, (unsigned, int*, void**, CUdeviceptr))        \
  X(cuStreamCreateWithPriority, (CUstream*, unsigned, int))               \
  X(cuStreamDestroy_v2, (CUstream))                                        \
  X(cuStreamQuery, (CUstream))                                             \
  X(cuStreamSynchronize, (CUstream))                                       \
  X(cuStreamWaitEvent, (CUstream, CUevent, unsigned))                     \
  X(cuEventCreate, (CUevent*, unsigned))                                  \
  X(cuEventDestroy_v2, (CUevent))                                          \
  X(cuEventRecord, (CUevent, CUstream))                                   \
  X(cuEventQuery, (CUevent))                                               \
  X(cuEventSynchronize, (CUevent))                                         \
  X(cuModuleLoadData, (CUmodule*, const void*))                           \
  X(cuModuleGetFunction, (CUfunction*, CUmodule, const char*))            \
  X(cuModuleUnload, (CUmodule))                                            \
  X(cuFuncSetAttribute, (CUfunction, int, int))                           \
  X(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
                     unsigned, CUstream, void**, void**))                                      \
  X(cuStreamBeginCapture_v2, (CUstream, int))                                                 \
  X(cuStreamEndCapture, (CUstream, CUgraph*))                                                 \
  X(cuGraphInstantiateWithFlags, (CUgraphExec*, CUgraph, unsigned long long))                 \
  X(cuGraphLaunch, (CUgraphExec, CUstream))                                                   \
  X(cuGraphDestroy, (CUgraph))                                                                \
  X(cuGraphExecDestroy, (CUgraphExec))

struct Driver {
#define FLAGOS_CUDA_SLOT(name, params) CUresult(*name) params = nullptr;
  FLAGOS_CUDA_DRIVER(FLAGOS_CUDA_SLOT)
#undef FLAGOS_CUDA_SLOT
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;  // _v2 from CUDA 12.8
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;         // optional
  // The offset and size of a kernel's parameter (CUDA 12.4 and later; optional).
  CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t*, size_t*) = nullptr;
  // This thread's stream capture mode, swapped (optional: every driver since CUDA 10.1).
  CUresult (*cuThreadExchangeStreamCaptureMode)(int*) = nullptr;
  // A TMA descriptor (CUDA 12.0 and later; optional): tensor map, data type, rank, address,
  // dims, byte strides, box, element strides, interleave, swizzle, L2 promotion, OOB fill.
  CUresult (*cuTensorMapEncodeTiled)(void*, int, unsigned, void*, const unsigned long long*,
                                     const unsigned long long*, const unsigned*, const unsigned*, int,
                                     int, int, int) = nullptr;
};
extern Driver driver;  // resolved by Cuda::open

// Records "<fn> failed: CUDA_ERROR_X (n): text[ (what)]" and returns the mapped status.
Status cu_fail(CUresult r, const char* fn, const std::string& what = "");
#define CU_CALL(fn, ...)                                        \
  do {                                                          \
    CUresult cu_r_ = driver.fn(__VA_ARGS__);                     \
    if (cu_r_ != CUDA_SUCCESS) return cu_fail(cu_r_, #fn);       \
  } while (0)

// Some context current (the thread's current device's when none is): for the driver calls
// that are not about one device (pointer queries, pinned host memory).
Status use_any_context();
// The primary context of `device`, retained on first use.
Status primary_ctx(int device, CUcontext* out);

struct CudaStream : kit::StreamBase {
  CUstream cu = nullptr;  // nullptr (0) for the default stream: the legacy NULL stream
};

struct CudaEvent : kit::EventBase {
  // One CUevent per device, created on the first record there (a CUevent belongs to one
  // context, and cuEventRecord needs event and stream in the same one).
  std::unique_ptr<std::atomic<CUevent>[]> per_device;
  std::mutex create_mu;
  CUevent last() { return per_device[device.load(std::memory_order_acquire)].load(); }  // recorded
};

struct CudaModule : kit::ModuleBase {
  CUmodule cu = nullptr;
};

struct CudaFunction : kit::FunctionBase {
  CUfunction cu = nullptr;
};

// What a stream capture recorded, and its instantiation (capture.cpp). The driver frees
// a CUgraphExec destroyed while launches of it are pending once they complete.
struct CudaCapturedWork : kit::CapturedWorkBase {
  CUgraph graph = nullptr;
  ~CudaCapturedWork();
};
struct CudaReplay : kit::ReplayBase {
  CUgraphExec exec = nullptr;
  ~CudaReplay();
};

struct Cuda : kit::VendorDefaults {
  static constexpr const char* kName = "cuda";
  static constexpr flagos_native_device_t kNativeDevice = FLAGOS_NATIVE_CUDA;
  static constexpr bool kRefuseAfterFork = true;  // the driver cannot be used across fork()
  using Stream = CudaStream;
  using Event = CudaEvent;
  using Module = CudaModule;
  using Function = CudaFunction;
  using CapturedWork = CudaCapturedWork;
  using Replay = CudaReplay;

  FLAGOS_HAL_KIT_RUNTIME_CALLS()
  // optional kit calls (device.cpp, memory.cpp)
  static Status activate(int device);  // its primary context current (device.cpp)
  static Status set_device(int device);
  static Status device_synchronize(int device);
  static Status pointer_attributes(const void* ptr, flagos_pointer_attributes_t* attr);
  FLAGOS_HAL_KIT_KERNEL_CALLS()  // the kernel extension (kit/kernels.hpp; kernels.cpp)
  // tensor descriptors (ABI 1.5; kernels.cpp): a CUtensorMap, what Triton's CUDA backend
  // passes for a host tensor descriptor lowered to TMA
  static Status kernel_encode_tensor_descriptor(int device, const flagos_tensor_descriptor_info_t& info,
                                                void* out, size_t* size);
  FLAGOS_HAL_KIT_CAPTURE_CALLS()  // the stream capture (kit/capture.hpp; capture.cpp)
};

using Kit = kit::Hal<Cuda>;

// The driver's "potentially unsafe" calls (allocating, instantiating or destroying a graph)
// would invalidate a capture this thread runs (thread-local mode). Those flagos makes while
// a stream captures are not part of any graph: core's allocator grows a graph's private
// pool during its capture, and a capture on one stream may end and be instantiated while
// another stream of the thread still captures. They run in relaxed mode, as PyTorch's CUDA
// allocator's do; a driver without cuThreadExchangeStreamCaptureMode keeps its mode.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  int mode_;
  bool swapped_ = false;
};

}  // namespace flagos_cuda

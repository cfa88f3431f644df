// flagos CUDA HAL: the flagos HAL ABI (flagos_hal.h) on the CUDA *driver* API.
//
// Built without the CUDA toolkit: libcuda.so.1 is opened at run time with dlopen and
// every entry point is resolved with dlsym, so the library loads (and reports zero
// devices) on machines without an NVIDIA driver. See docs/hal/cuda.md.
//
// Mapping in one paragraph: HAL device N is CUDA ordinal N (CUDA_VISIBLE_DEVICES
// applies); all work happens in each device's *primary* context, the one the CUDA
// runtime (and so PyTorch) uses, so pointers, streams and events interoperate with
// torch.cuda. Every call that touches a device makes that device's primary context
// current on the calling thread. Streams are CUstreams (non-blocking, like PyTorch's
// pool streams); the default stream of a device is the legacy NULL stream (CUstream 0)
// of its primary context, i.e. PyTorch's default CUDA stream. Events are CUevents,
// created lazily in the context of the device they are first recorded on.
//
// Only one symbol is exported: flagos_hal_get_table (build with -fvisibility=hidden).

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "flagos_hal/flagos_hal.h"
#include "flagos_hal/status_text.h"

struct flagos_device_state;  // per-device state, defined below

namespace {

// ---------------------------------------------------------------------------------
// The few CUDA driver API types and constants we use, declared here so that no CUDA
// header is needed. Values are those of cuda.h (verified against cuda.h of CUDA 11.6
// and later; they are ABI and never change between releases).
// ---------------------------------------------------------------------------------
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;  // 64-bit on LP64 (cuda.h: CUdeviceptr_v2)
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef int CUdevice_attribute;
typedef int CUpointer_attribute;

// CUresult (enum cudaError_enum)
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
constexpr CUresult CUDA_ERROR_DEINITIALIZED = 4;
constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
constexpr CUresult CUDA_ERROR_DEVICE_UNAVAILABLE = 46;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
constexpr CUresult CUDA_ERROR_ECC_UNCORRECTABLE = 214;
constexpr CUresult CUDA_ERROR_NVLINK_UNCORRECTABLE = 220;
constexpr CUresult CUDA_ERROR_INVALID_HANDLE = 400;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr CUresult CUDA_ERROR_ILLEGAL_ADDRESS = 700;
constexpr CUresult CUDA_ERROR_LAUNCH_TIMEOUT = 702;
constexpr CUresult CUDA_ERROR_ASSERT = 710;
constexpr CUresult CUDA_ERROR_HARDWARE_STACK_ERROR = 714;
constexpr CUresult CUDA_ERROR_ILLEGAL_INSTRUCTION = 715;
constexpr CUresult CUDA_ERROR_MISALIGNED_ADDRESS = 716;
constexpr CUresult CUDA_ERROR_INVALID_ADDRESS_SPACE = 717;
constexpr CUresult CUDA_ERROR_INVALID_PC = 718;
constexpr CUresult CUDA_ERROR_LAUNCH_FAILED = 719;
constexpr CUresult CUDA_ERROR_NOT_PERMITTED = 800;
constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;
constexpr CUresult CUDA_ERROR_SYSTEM_NOT_READY = 802;
constexpr CUresult CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803;
constexpr CUresult CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804;
constexpr CUresult CUDA_ERROR_EXTERNAL_DEVICE = 911;

// CUdevice_attribute
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;

// CUpointer_attribute
constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;      // CUmemorytype
constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;   // int
constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11;  // CUdeviceptr
constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12;      // size_t

// CUmemorytype
constexpr unsigned int CU_MEMORYTYPE_HOST = 1;
constexpr unsigned int CU_MEMORYTYPE_DEVICE = 2;
constexpr unsigned int CU_MEMORYTYPE_UNIFIED = 4;

// Flags
constexpr unsigned int CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned int CU_EVENT_BLOCKING_SYNC = 0x1;
constexpr unsigned int CU_EVENT_DISABLE_TIMING = 0x2;
constexpr unsigned int CU_MEMHOSTALLOC_PORTABLE = 0x1;

// ---------------------------------------------------------------------------------
// The driver, opened on first use.
// ---------------------------------------------------------------------------------
struct Driver {
  void* handle = nullptr;

  CUresult (*cuInit)(unsigned int) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;  // optional
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem_v2)(size_t*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxSynchronize)(void) = nullptr;
  CUresult (*cuCtxGetStreamPriorityRange)(int*, int*) = nullptr;
  CUresult (*cuMemGetInfo_v2)(size_t*, size_t*) = nullptr;
  CUresult (*cuMemAlloc_v2)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree_v2)(CUdeviceptr) = nullptr;
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned int) = nullptr;
  CUresult (*cuMemFreeHost)(void*) = nullptr;
  CUresult (*cuMemcpy)(CUdeviceptr, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemcpyPeer)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t) = nullptr;
  CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*cuMemsetD8_v2)(CUdeviceptr, unsigned char, size_t) = nullptr;
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream) = nullptr;
  CUresult (*cuPointerGetAttribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  CUresult (*cuPointerGetAttributes)(unsigned int, CUpointer_attribute*, void**,
                                     CUdeviceptr) = nullptr;
  CUresult (*cuStreamCreateWithPriority)(CUstream*, unsigned int, int) = nullptr;
  CUresult (*cuStreamDestroy_v2)(CUstream) = nullptr;
  CUresult (*cuStreamQuery)(CUstream) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned int) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned int) = nullptr;
  CUresult (*cuEventDestroy_v2)(CUevent) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventQuery)(CUevent) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
};

struct Global {
  std::once_flag once;
  bool ok = false;           // driver loaded, symbols resolved, cuInit succeeded
  std::string error;         // why not ok ("" when ok)
  int driver_version = 0;    // cuDriverGetVersion, e.g. 12040
  int device_count = 0;
  Driver d;
  flagos_device_state* devices = nullptr;  // [device_count], never freed
  std::string version;       // get_version text
};

Global& G() {
  static Global* g = new Global();  // never destroyed: HAL calls may come during exit
  return *g;
}

std::atomic<bool> g_forked_child{false};

// ---------------------------------------------------------------------------------
// Thread-local error text.
// ---------------------------------------------------------------------------------
thread_local std::string tl_error;
thread_local int tl_device = 0;

flagos_status_t fail(flagos_status_t st, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
flagos_status_t fail(flagos_status_t st, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  tl_error = buf;
  return st;
}

flagos_status_t map_cu(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS:
      return FLAGOS_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
      return FLAGOS_ERROR_INVALID_VALUE;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return FLAGOS_ERROR_OUT_OF_MEMORY;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      return FLAGOS_ERROR_NO_DEVICE;
    case CUDA_ERROR_INVALID_DEVICE:
      return FLAGOS_ERROR_INVALID_DEVICE;
    case CUDA_ERROR_INVALID_HANDLE:
      return FLAGOS_ERROR_INVALID_HANDLE;
    case CUDA_ERROR_NOT_READY:
      return FLAGOS_ERROR_NOT_READY;
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_EXTERNAL_DEVICE:
      return FLAGOS_ERROR_DEVICE_FAULT;
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_NOT_SUPPORTED:
      return FLAGOS_ERROR_NOT_SUPPORTED;
    default:
      return FLAGOS_ERROR_UNKNOWN;
  }
}

// "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"
std::string cu_text(CUresult r) {
  const Driver& d = G().d;
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.cuGetErrorName && d.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
  if (d.cuGetErrorString && d.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
  std::string out = name ? name : "CUresult";
  out += " (" + std::to_string(r) + ")";
  out += ": ";
  out += text ? text : "unrecognized CUDA error code";
  return out;
}

// Records "<fn> failed: <cuda text>[: <what>]" and returns the mapped status.
flagos_status_t cu_fail(CUresult r, const char* fn, const char* what = nullptr) {
  std::string msg = std::string(fn) + " failed: " + cu_text(r);
  if (what && *what) msg += std::string(" (") + what + ")";
  tl_error = msg;
  return map_cu(r);
}

#define CU_CALL(fn, ...)                                  \
  do {                                                    \
    CUresult cu_r_ = G().d.fn(__VA_ARGS__);               \
    if (cu_r_ != CUDA_SUCCESS) return cu_fail(cu_r_, #fn); \
  } while (0)

// ---------------------------------------------------------------------------------
// Handles.
// ---------------------------------------------------------------------------------
constexpr uint32_t kStreamMagic = 0x464c5354u;  // "FLST"
constexpr uint32_t kEventMagic = 0x464c4556u;   // "FLEV"

}  // namespace

// The opaque handle types of the ABI. Objects are never freed: destroyed ones go to a
// free list and are reused, so a stale handle reads as "not alive" (INVALID_HANDLE)
// instead of touching freed memory.
struct flagos_stream_s {
  uint32_t magic = kStreamMagic;
  std::atomic<bool> alive{false};
  bool is_default = false;
  int device = 0;
  CUstream cu = nullptr;  // nullptr (0) for the default (legacy NULL) stream
};

struct flagos_event_s {
  uint32_t magic = kEventMagic;
  std::atomic<bool> alive{false};
  unsigned int flags = 0;      // FLAGOS_EVENT_*
  unsigned int cu_flags = 0;   // CU_EVENT_*
  std::atomic<int> last_device{-1};  // device of the last record; -1: never recorded
  // One CUevent per device, created on the first record on that device (a CUevent
  // belongs to one context, and cuEventRecord needs event and stream in the same one).
  std::unique_ptr<std::atomic<CUevent>[]> per_device;
  int slots = 0;
  std::mutex create_mu;
};

struct flagos_device_state {
  CUdevice cu_device = 0;
  size_t total_memory = 0;
  std::atomic<CUcontext> primary{nullptr};
  std::mutex mu;
  flagos_stream_s default_stream;
};

namespace {

// ---------------------------------------------------------------------------------
// Initialization.
// ---------------------------------------------------------------------------------
template <typename F>
bool resolve(void* h, F& slot, const char* name, std::string& missing) {
  slot = reinterpret_cast<F>(dlsym(h, name));
  if (!slot) {
    if (!missing.empty()) missing += ", ";
    missing += name;
    return false;
  }
  return true;
}

void on_fork_child() {
  if (G().ok) g_forked_child.store(true);
}

void init_once() {
  Global& g = G();
  dlerror();
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    g.error = std::string("libcuda.so.1 not found: ") + (e ? e : "dlopen failed") +
              " (no NVIDIA driver on this machine?)";
    return;
  }
  g.d.handle = h;
  Driver& d = g.d;
  std::string missing;
#define R(sym) resolve(h, d.sym, #sym, missing)
  R(cuInit);
  R(cuDriverGetVersion);
  R(cuGetErrorString);
  R(cuDeviceGetCount);
  R(cuDeviceGet);
  R(cuDeviceGetName);
  R(cuDeviceGetAttribute);
  R(cuDeviceTotalMem_v2);
  R(cuDevicePrimaryCtxRetain);
  R(cuCtxSetCurrent);
  R(cuCtxGetCurrent);
  R(cuCtxSynchronize);
  R(cuCtxGetStreamPriorityRange);
  R(cuMemGetInfo_v2);
  R(cuMemAlloc_v2);
  R(cuMemFree_v2);
  R(cuMemHostAlloc);
  R(cuMemFreeHost);
  R(cuMemcpy);
  R(cuMemcpyPeer);
  R(cuMemcpyAsync);
  R(cuMemsetD8_v2);
  R(cuMemsetD8Async);
  R(cuPointerGetAttribute);
  R(cuPointerGetAttributes);
  R(cuStreamCreateWithPriority);
  R(cuStreamDestroy_v2);
  R(cuStreamQuery);
  R(cuStreamSynchronize);
  R(cuStreamWaitEvent);
  R(cuEventCreate);
  R(cuEventDestroy_v2);
  R(cuEventRecord);
  R(cuEventQuery);
  R(cuEventSynchronize);
#undef R
  // Optional / versioned: CUDA 12.8 added cuEventElapsedTime_v2 (CUDA 13 headers map
  // the plain name onto it); older drivers only have the plain one.
  d.cuGetErrorName = reinterpret_cast<decltype(d.cuGetErrorName)>(dlsym(h, "cuGetErrorName"));
  d.cuEventElapsedTime =
      reinterpret_cast<decltype(d.cuEventElapsedTime)>(dlsym(h, "cuEventElapsedTime_v2"));
  if (!d.cuEventElapsedTime) resolve(h, d.cuEventElapsedTime, "cuEventElapsedTime", missing);
  if (!missing.empty()) {
    g.error = "libcuda.so.1 is too old or not an NVIDIA driver: missing " + missing;
    return;
  }
  if (d.cuDriverGetVersion(&g.driver_version) != CUDA_SUCCESS) g.driver_version = 0;
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    g.error = "cuInit failed: " + cu_text(r);
    return;
  }
  int count = 0;
  r = d.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) {
    g.error = "cuDeviceGetCount failed: " + cu_text(r);
    return;
  }
  if (count < 0) count = 0;
  flagos_device_state* devs = new flagos_device_state[count > 0 ? count : 1];
  for (int i = 0; i < count; ++i) {
    r = d.cuDeviceGet(&devs[i].cu_device, i);
    if (r != CUDA_SUCCESS) {
      g.error = "cuDeviceGet(" + std::to_string(i) + ") failed: " + cu_text(r);
      return;  // devs leaked on purpose (tiny, and this path is exceptional)
    }
    size_t total = 0;
    if (d.cuDeviceTotalMem_v2(&total, devs[i].cu_device) == CUDA_SUCCESS)
      devs[i].total_memory = total;
    devs[i].default_stream.is_default = true;
    devs[i].default_stream.device = i;
    devs[i].default_stream.cu = nullptr;
    devs[i].default_stream.alive.store(true);
  }
  g.devices = devs;
  g.device_count = count;
  if (count == 0) g.error = "the CUDA driver reports no devices";
  g.ok = true;
  pthread_atfork(nullptr, nullptr, on_fork_child);
}

Global& init() {
  Global& g = G();
  std::call_once(g.once, init_once);
  return g;
}

// Driver loaded and at least one device, and usable in this process.
flagos_status_t check_driver() {
  Global& g = init();
  if (!g.ok || g.device_count == 0)
    return fail(FLAGOS_ERROR_NO_DEVICE, "flagos cuda HAL: %s", g.error.c_str());
  if (g_forked_child.load(std::memory_order_relaxed))
    return fail(FLAGOS_ERROR_NO_DEVICE,
                "flagos cuda HAL: the CUDA driver was initialized before fork(); a forked "
                "child cannot use it (use the 'spawn' start method for subprocesses)");
  return FLAGOS_SUCCESS;
}

flagos_status_t check_device(int device) {
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if (device < 0 || device >= G().device_count)
    return fail(FLAGOS_ERROR_INVALID_DEVICE,
                "flagos cuda HAL: invalid device index %d (this HAL has %d device%s)", device,
                G().device_count, G().device_count == 1 ? "" : "s");
  return FLAGOS_SUCCESS;
}

// The primary context of `device` (retained once, for the process lifetime).
flagos_status_t primary_ctx(int device, CUcontext* out) {
  flagos_device_state& ds = G().devices[device];
  CUcontext c = ds.primary.load(std::memory_order_acquire);
  if (c) {
    *out = c;
    return FLAGOS_SUCCESS;
  }
  std::lock_guard<std::mutex> lock(ds.mu);
  c = ds.primary.load(std::memory_order_acquire);
  if (!c) {
    CUresult r = G().d.cuDevicePrimaryCtxRetain(&c, ds.cu_device);
    if (r != CUDA_SUCCESS) {
      std::string what = "device " + std::to_string(device);
      return cu_fail(r, "cuDevicePrimaryCtxRetain", what.c_str());
    }
    ds.primary.store(c, std::memory_order_release);
  }
  *out = c;
  return FLAGOS_SUCCESS;
}

// Make the primary context of `device` current on this thread. The check against
// cuCtxGetCurrent (a thread-local read inside the driver) is the per-thread cache: we
// call cuCtxSetCurrent only when something else (e.g. torch.cuda) switched contexts.
flagos_status_t use_device(int device) {
  CUcontext want = nullptr;
  flagos_status_t st = primary_ctx(device, &want);
  if (st != FLAGOS_SUCCESS) return st;
  CUcontext cur = nullptr;
  if (G().d.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == want) return FLAGOS_SUCCESS;
  CU_CALL(cuCtxSetCurrent, want);
  return FLAGOS_SUCCESS;
}

// Some context current (the calling thread's current device's, if none is): needed by
// driver calls that are not about one device (pointer queries, pinned host memory).
flagos_status_t use_any_context() {
  CUcontext cur = nullptr;
  if (G().d.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur) return FLAGOS_SUCCESS;
  return use_device(tl_device);
}

// Device owning the memory at ptr (a CUDA ordinal), or -1 when the driver does not know.
int device_of(const void* ptr) {
  int ordinal = -1;
  CUresult r = G().d.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                           reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS || ordinal < 0 || ordinal >= G().device_count) return -1;
  return ordinal;
}

flagos_status_t check_stream(flagos_stream_t s) {
  if (!s || s->magic != kStreamMagic || !s->alive.load(std::memory_order_acquire))
    return fail(FLAGOS_ERROR_INVALID_HANDLE,
                "flagos cuda HAL: %p is not a live stream of this HAL", static_cast<void*>(s));
  return FLAGOS_SUCCESS;
}

flagos_status_t check_event(flagos_event_t e) {
  if (!e || e->magic != kEventMagic || !e->alive.load(std::memory_order_acquire))
    return fail(FLAGOS_ERROR_INVALID_HANDLE,
                "flagos cuda HAL: %p is not a live event of this HAL", static_cast<void*>(e));
  return FLAGOS_SUCCESS;
}

// Allocations handed out by malloc / host_malloc, so that free of a foreign pointer
// is INVALID_HANDLE (and never frees torch.cuda's memory under it).
struct AllocTable {
  std::mutex mu;
  std::unordered_map<uintptr_t, int> device_ptrs;  // ptr -> device
  std::unordered_map<uintptr_t, size_t> host_ptrs;  // ptr -> size
};
AllocTable& allocs() {
  static AllocTable* t = new AllocTable();
  return *t;
}

struct HandlePool {
  std::mutex mu;
  std::vector<flagos_stream_s*> free_streams;
  std::vector<flagos_event_s*> free_events;
};
HandlePool& pool() {
  static HandlePool* p = new HandlePool();
  return *p;
}

std::atomic<bool> g_prio_cached{false};
std::atomic<int> g_prio_least{0};
std::atomic<int> g_prio_greatest{0};

flagos_status_t priority_range(int* least, int* greatest) {
  if (g_prio_cached.load(std::memory_order_acquire)) {
    *least = g_prio_least.load();
    *greatest = g_prio_greatest.load();
    return FLAGOS_SUCCESS;
  }
  flagos_status_t st = use_device(tl_device);
  if (st != FLAGOS_SUCCESS) return st;
  int l = 0, gr = 0;
  CU_CALL(cuCtxGetStreamPriorityRange, &l, &gr);
  g_prio_least.store(l);
  g_prio_greatest.store(gr);
  g_prio_cached.store(true, std::memory_order_release);
  *least = l;
  *greatest = gr;
  return FLAGOS_SUCCESS;
}

// =================================================================================
// The table functions.
// =================================================================================

// ---- identity ----------------------------------------------------------------------
flagos_status_t hal_get_name(const char** name) {
  if (!name) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_name: name is NULL");
  *name = "cuda";
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_get_version(const char** version) {
  if (!version) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_version: version is NULL");
  static std::once_flag once;
  std::call_once(once, [] {
    Global& g = init();
    std::string v = "flagos cuda HAL (ABI " + std::to_string(FLAGOS_HAL_ABI_MAJOR) + "." +
                    std::to_string(FLAGOS_HAL_ABI_MINOR) + ", CUDA driver API via libcuda.so.1)";
    if (g.driver_version > 0) {
      v += "; CUDA driver " + std::to_string(g.driver_version / 1000) + "." +
           std::to_string((g.driver_version % 1000) / 10) + " (" +
           std::to_string(g.driver_version) + ")";
    }
    if (g.ok) {
      v += "; " + std::to_string(g.device_count) + " device" + (g.device_count == 1 ? "" : "s");
    } else {
      v += "; driver unavailable: " + g.error;
    }
    g.version = v;
  });
  *version = G().version.c_str();
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_get_error_string(flagos_status_t status, const char** text) {
  if (!text) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_error_string: text is NULL");
  *text = flagos_status_text(status);
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_get_last_error_message(const char** text) {
  if (!text) return FLAGOS_ERROR_INVALID_VALUE;
  *text = tl_error.c_str();
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_get_native_device(flagos_native_device_t* kind) {
  if (!kind) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_native_device: kind is NULL");
  *kind = FLAGOS_NATIVE_CUDA;
  return FLAGOS_SUCCESS;
}

// ---- devices -----------------------------------------------------------------------
flagos_status_t hal_get_device_count(int* count) {
  if (!count) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_device_count: count is NULL");
  Global& g = init();
  *count = g.ok ? g.device_count : 0;
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_get_device(int* device) {
  if (!device) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_device: device is NULL");
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  *device = tl_device;
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_set_device(int device) {
  flagos_status_t st = check_device(device);
  if (st != FLAGOS_SUCCESS) return st;
  tl_device = device;
  // As cudaSetDevice: the device's primary context becomes current. It is created
  // lazily (by the first call that needs it), so selecting a device costs nothing.
  if (G().devices[device].primary.load(std::memory_order_acquire)) return use_device(device);
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_get_device_properties(int device, flagos_device_properties_t* props) {
  if (!props) return fail(FLAGOS_ERROR_INVALID_VALUE, "get_device_properties: props is NULL");
  if (props->struct_size < sizeof(uint32_t))
    return fail(FLAGOS_ERROR_INVALID_VALUE,
                "get_device_properties: props->struct_size (%u) is too small",
                props->struct_size);
  flagos_status_t st = check_device(device);
  if (st != FLAGOS_SUCCESS) return st;
  const Driver& d = G().d;
  CUdevice dev = G().devices[device].cu_device;
  flagos_device_properties_t p;
  std::memset(&p, 0, sizeof(p));
  p.struct_size = props->struct_size;
  // No context needed (nor created) for these queries.
  CU_CALL(cuDeviceGetName, p.name, static_cast<int>(sizeof(p.name)), dev);
  p.name[sizeof(p.name) - 1] = '\0';
  size_t total = 0;
  CU_CALL(cuDeviceTotalMem_v2, &total, dev);
  p.total_memory = total;
  int v = 0;
  CU_CALL(cuDeviceGetAttribute, &v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  p.compute_units = v;
  CU_CALL(cuDeviceGetAttribute, &v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  p.major = v;
  CU_CALL(cuDeviceGetAttribute, &v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  p.minor = v;
  p.native_device_index = device;  // HAL index == CUDA ordinal
  (void)d;
  size_t n = props->struct_size < sizeof(p) ? props->struct_size : sizeof(p);
  std::memcpy(props, &p, n);
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_device_synchronize(int device) {
  flagos_status_t st = check_device(device);
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = use_device(device)) != FLAGOS_SUCCESS) return st;
  CU_CALL(cuCtxSynchronize);
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_mem_get_info(int device, size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes)
    return fail(FLAGOS_ERROR_INVALID_VALUE, "mem_get_info: NULL out-pointer");
  flagos_status_t st = check_device(device);
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = use_device(device)) != FLAGOS_SUCCESS) return st;
  size_t f = 0, t = 0;
  CU_CALL(cuMemGetInfo_v2, &f, &t);
  *free_bytes = f;
  *total_bytes = t;
  return FLAGOS_SUCCESS;
}

// ---- memory ------------------------------------------------------------------------
flagos_status_t hal_malloc(int device, size_t size, void** ptr) {
  if (!ptr) return fail(FLAGOS_ERROR_INVALID_VALUE, "malloc: ptr is NULL");
  flagos_status_t st = check_device(device);
  if (st != FLAGOS_SUCCESS) return st;
  if (size == 0) {
    *ptr = nullptr;
    return FLAGOS_SUCCESS;
  }
  size_t total = G().devices[device].total_memory;
  if (total != 0 && size > total)
    return fail(FLAGOS_ERROR_OUT_OF_MEMORY,
                "malloc: %zu bytes requested on cuda device %d, which has %zu bytes in total",
                size, device, total);
  if ((st = use_device(device)) != FLAGOS_SUCCESS) return st;
  CUdeviceptr p = 0;
  CUresult r = G().d.cuMemAlloc_v2(&p, size);
  if (r != CUDA_SUCCESS) {
    std::string what = std::to_string(size) + " bytes on device " + std::to_string(device);
    st = cu_fail(r, "cuMemAlloc_v2", what.c_str());
    // A size the driver refuses outright is still "this allocation cannot be served".
    if (r == CUDA_ERROR_INVALID_VALUE) st = FLAGOS_ERROR_OUT_OF_MEMORY;
    return st;
  }
  {
    AllocTable& t = allocs();
    std::lock_guard<std::mutex> lock(t.mu);
    t.device_ptrs[static_cast<uintptr_t>(p)] = device;
  }
  *ptr = reinterpret_cast<void*>(p);
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_free(int device, void* ptr) {
  if (!ptr) return FLAGOS_SUCCESS;
  flagos_status_t st = check_device(device);
  if (st != FLAGOS_SUCCESS) return st;
  AllocTable& t = allocs();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.device_ptrs.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == t.device_ptrs.end())
      return fail(FLAGOS_ERROR_INVALID_HANDLE,
                  "free: %p was not returned by this HAL's malloc (or was already freed)", ptr);
    if (it->second != device)
      return fail(FLAGOS_ERROR_INVALID_HANDLE,
                  "free: %p was allocated on device %d, not on device %d", ptr, it->second,
                  device);
    t.device_ptrs.erase(it);
  }
  if ((st = use_device(device)) != FLAGOS_SUCCESS) return st;
  CU_CALL(cuMemFree_v2, reinterpret_cast<CUdeviceptr>(ptr));
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_host_malloc(size_t size, void** ptr) {
  if (!ptr) return fail(FLAGOS_ERROR_INVALID_VALUE, "host_malloc: ptr is NULL");
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if (size == 0) {
    *ptr = nullptr;
    return FLAGOS_SUCCESS;
  }
  if ((st = use_any_context()) != FLAGOS_SUCCESS) return st;
  void* p = nullptr;
  CUresult r = G().d.cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) {
    std::string what = std::to_string(size) + " bytes of pinned host memory";
    st = cu_fail(r, "cuMemHostAlloc", what.c_str());
    if (r == CUDA_ERROR_INVALID_VALUE) st = FLAGOS_ERROR_OUT_OF_MEMORY;
    return st;
  }
  {
    AllocTable& t = allocs();
    std::lock_guard<std::mutex> lock(t.mu);
    t.host_ptrs[reinterpret_cast<uintptr_t>(p)] = size;
  }
  *ptr = p;
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_host_free(void* ptr) {
  if (!ptr) return FLAGOS_SUCCESS;
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  {
    AllocTable& t = allocs();
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.host_ptrs.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == t.host_ptrs.end())
      return fail(FLAGOS_ERROR_INVALID_HANDLE,
                  "host_free: %p was not returned by this HAL's host_malloc", ptr);
    t.host_ptrs.erase(it);
  }
  if ((st = use_any_context()) != FLAGOS_SUCCESS) return st;
  CU_CALL(cuMemFreeHost, ptr);
  return FLAGOS_SUCCESS;
}

flagos_status_t check_copy_args(const char* fn, void* dst, const void* src, size_t size,
                                flagos_memcpy_kind_t kind) {
  if (static_cast<int>(kind) < 0 || static_cast<int>(kind) > FLAGOS_MEMCPY_DEVICE_TO_DEVICE)
    return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: invalid copy kind %d", fn,
                static_cast<int>(kind));
  if (size != 0 && (!dst || !src))
    return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: NULL %s pointer for a %zu-byte copy", fn,
                dst ? "source" : "destination", size);
  return FLAGOS_SUCCESS;
}

// Synchronous copy. cuMemcpy runs on the legacy default stream of the current context,
// so it is ordered after the work already queued there; where cuMemcpy may return
// before the bytes have landed (pageable->device, device->device), the legacy stream is
// synchronized afterwards so that the call returns only after the copy is complete.
flagos_status_t hal_memcpy(void* dst, const void* src, size_t size, flagos_memcpy_kind_t kind) {
  flagos_status_t st = check_copy_args("memcpy", dst, src, size, kind);
  if (st != FLAGOS_SUCCESS) return st;
  if (size == 0) return FLAGOS_SUCCESS;
  if (kind == FLAGOS_MEMCPY_HOST_TO_HOST) {
    std::memmove(dst, src, size);
    return FLAGOS_SUCCESS;
  }
  if ((st = check_driver()) != FLAGOS_SUCCESS) return st;
  if ((st = use_any_context()) != FLAGOS_SUCCESS) return st;
  const Driver& d = G().d;
  CUdeviceptr cdst = reinterpret_cast<CUdeviceptr>(dst);
  CUdeviceptr csrc = reinterpret_cast<CUdeviceptr>(src);
  if (kind == FLAGOS_MEMCPY_DEVICE_TO_DEVICE) {
    int sd = device_of(src), dd = device_of(dst);
    if (sd < 0) sd = dd >= 0 ? dd : tl_device;
    if (dd < 0) dd = sd;
    if (sd != dd) {
      CUcontext sctx = nullptr, dctx = nullptr;
      if ((st = primary_ctx(sd, &sctx)) != FLAGOS_SUCCESS) return st;
      if ((st = primary_ctx(dd, &dctx)) != FLAGOS_SUCCESS) return st;
      if ((st = use_device(sd)) != FLAGOS_SUCCESS) return st;
      // Serialized with the pending work of both contexts (driver API contract).
      CU_CALL(cuMemcpyPeer, cdst, dctx, csrc, sctx, size);
      CU_CALL(cuStreamSynchronize, nullptr);
      if ((st = use_device(dd)) != FLAGOS_SUCCESS) return st;
      CU_CALL(cuStreamSynchronize, nullptr);
      return FLAGOS_SUCCESS;
    }
    if ((st = use_device(sd)) != FLAGOS_SUCCESS) return st;
    CU_CALL(cuMemcpy, cdst, csrc, size);
    CU_CALL(cuStreamSynchronize, nullptr);
    return FLAGOS_SUCCESS;
  }
  const void* dev_side = kind == FLAGOS_MEMCPY_HOST_TO_DEVICE ? dst : src;
  int dev = device_of(dev_side);
  if (dev < 0) dev = tl_device;
  if ((st = use_device(dev)) != FLAGOS_SUCCESS) return st;
  CU_CALL(cuMemcpy, cdst, csrc, size);
  if (kind == FLAGOS_MEMCPY_HOST_TO_DEVICE) CU_CALL(cuStreamSynchronize, nullptr);
  (void)d;
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_memcpy_async(void* dst, const void* src, size_t size,
                                 flagos_memcpy_kind_t kind, flagos_stream_t stream) {
  flagos_status_t st = check_copy_args("memcpy_async", dst, src, size, kind);
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = check_driver()) != FLAGOS_SUCCESS) return st;
  if ((st = check_stream(stream)) != FLAGOS_SUCCESS) return st;
  if (size == 0) return FLAGOS_SUCCESS;
  if ((st = use_device(stream->device)) != FLAGOS_SUCCESS) return st;
  CU_CALL(cuMemcpyAsync, reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src),
          size, stream->cu);
  return FLAGOS_SUCCESS;
}

// Synchronous memset: ordered on the legacy default stream, and complete on return.
flagos_status_t hal_memset(void* ptr, int value, size_t size) {
  if (size == 0) return FLAGOS_SUCCESS;
  if (!ptr) return fail(FLAGOS_ERROR_INVALID_VALUE, "memset: ptr is NULL");
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = use_any_context()) != FLAGOS_SUCCESS) return st;
  int dev = device_of(ptr);
  if (dev < 0) dev = tl_device;
  if ((st = use_device(dev)) != FLAGOS_SUCCESS) return st;
  CU_CALL(cuMemsetD8_v2, reinterpret_cast<CUdeviceptr>(ptr), static_cast<unsigned char>(value),
          size);
  CU_CALL(cuStreamSynchronize, nullptr);
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_memset_async(void* ptr, int value, size_t size, flagos_stream_t stream) {
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = check_stream(stream)) != FLAGOS_SUCCESS) return st;
  if (size == 0) return FLAGOS_SUCCESS;
  if (!ptr) return fail(FLAGOS_ERROR_INVALID_VALUE, "memset_async: ptr is NULL");
  if ((st = use_device(stream->device)) != FLAGOS_SUCCESS) return st;
  CU_CALL(cuMemsetD8Async, reinterpret_cast<CUdeviceptr>(ptr),
          static_cast<unsigned char>(value), size, stream->cu);
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_pointer_get_attributes(const void* ptr, flagos_pointer_attributes_t* attr) {
  if (!attr) return fail(FLAGOS_ERROR_INVALID_VALUE, "pointer_get_attributes: attr is NULL");
  flagos_pointer_attributes_t out;
  out.type = FLAGOS_POINTER_UNKNOWN;
  out.device = -1;
  out.base = nullptr;
  out.size = 0;
  Global& g = init();
  // No driver, no devices, or a forked child: nothing can be CUDA memory here.
  if (!ptr || !g.ok || g.device_count == 0 || g_forked_child.load() ||
      use_any_context() != FLAGOS_SUCCESS) {
    *attr = out;
    return FLAGOS_SUCCESS;
  }
  const Driver& d = g.d;
  CUdeviceptr p = reinterpret_cast<CUdeviceptr>(ptr);
  unsigned int memtype = 0;
  int ordinal = -1;
  CUdeviceptr start = 0;
  size_t range = 0;
  CUpointer_attribute attrs[4] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[4] = {&memtype, &ordinal, &start, &range};
  // cuPointerGetAttributes does not fail on memory CUDA does not know: it leaves the
  // values at their defaults (memtype 0). Should a driver refuse the batch, ask one
  // attribute at a time; CUDA_ERROR_INVALID_VALUE there means "not CUDA memory".
  if (d.cuPointerGetAttributes(4, attrs, data, p) != CUDA_SUCCESS) {
    memtype = 0;
    ordinal = -1;
    start = 0;
    range = 0;
    if (d.cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS)
      memtype = 0;
    if (memtype != 0) {
      if (d.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) !=
          CUDA_SUCCESS)
        ordinal = -1;
      if (d.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) !=
              CUDA_SUCCESS ||
          d.cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) != CUDA_SUCCESS) {
        start = 0;
        range = 0;
      }
    }
  }
  if (memtype == CU_MEMORYTYPE_DEVICE || memtype == CU_MEMORYTYPE_UNIFIED) {
    out.type = FLAGOS_POINTER_DEVICE;
    out.device = (ordinal >= 0 && ordinal < g.device_count) ? ordinal : -1;
  } else if (memtype == CU_MEMORYTYPE_HOST) {
    out.type = FLAGOS_POINTER_PINNED_HOST;
  } else {
    *attr = out;  // unregistered host memory, or anything else: unknown
    return FLAGOS_SUCCESS;
  }
  if (start != 0 && range != 0 && p >= start && p - start < range) {
    out.base = reinterpret_cast<void*>(start);
    out.size = range;
  }
  *attr = out;
  return FLAGOS_SUCCESS;
}

// ---- streams -----------------------------------------------------------------------
flagos_status_t hal_stream_create(int device, int priority, flagos_stream_t* stream) {
  if (!stream) return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_create: stream is NULL");
  flagos_status_t st = check_device(device);
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = use_device(device)) != FLAGOS_SUCCESS) return st;
  int least = 0, greatest = 0;
  if ((st = priority_range(&least, &greatest)) != FLAGOS_SUCCESS) return st;
  if ((st = use_device(device)) != FLAGOS_SUCCESS) return st;  // priority_range may switch
  if (priority > least) priority = least;
  if (priority < greatest) priority = greatest;
  CUstream cs = nullptr;
  // Non-blocking, as PyTorch's own streams: no implicit sync with the legacy stream.
  CU_CALL(cuStreamCreateWithPriority, &cs, CU_STREAM_NON_BLOCKING, priority);
  flagos_stream_s* s = nullptr;
  {
    HandlePool& hp = pool();
    std::lock_guard<std::mutex> lock(hp.mu);
    if (!hp.free_streams.empty()) {
      s = hp.free_streams.back();
      hp.free_streams.pop_back();
    }
  }
  if (!s) s = new (std::nothrow) flagos_stream_s();
  if (!s) {
    G().d.cuStreamDestroy_v2(cs);
    return fail(FLAGOS_ERROR_OUT_OF_MEMORY, "stream_create: out of host memory");
  }
  s->is_default = false;
  s->device = device;
  s->cu = cs;
  s->alive.store(true, std::memory_order_release);
  *stream = s;
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_stream_get_priority_range(int* least, int* greatest) {
  if (!least || !greatest)
    return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_get_priority_range: NULL out-pointer");
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  int l = 0, g = 0;
  if ((st = priority_range(&l, &g)) != FLAGOS_SUCCESS) return st;
  *least = l;
  *greatest = g;
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_stream_get_default(int device, flagos_stream_t* stream) {
  if (!stream) return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_get_default: stream is NULL");
  flagos_status_t st = check_device(device);
  if (st != FLAGOS_SUCCESS) return st;
  *stream = &G().devices[device].default_stream;
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_stream_destroy(flagos_stream_t stream) {
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = check_stream(stream)) != FLAGOS_SUCCESS) return st;
  if (stream->is_default)
    return fail(FLAGOS_ERROR_INVALID_VALUE,
                "stream_destroy: the default stream of device %d cannot be destroyed",
                stream->device);
  bool expected = true;
  if (!stream->alive.compare_exchange_strong(expected, false))
    return fail(FLAGOS_ERROR_INVALID_HANDLE, "stream_destroy: stream already destroyed");
  if ((st = use_device(stream->device)) != FLAGOS_SUCCESS) return st;
  // The driver releases the stream once its queued work has finished.
  CUresult r = G().d.cuStreamDestroy_v2(stream->cu);
  stream->cu = nullptr;
  {
    HandlePool& hp = pool();
    std::lock_guard<std::mutex> lock(hp.mu);
    hp.free_streams.push_back(stream);
  }
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuStreamDestroy_v2");
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_stream_query(flagos_stream_t stream) {
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = check_stream(stream)) != FLAGOS_SUCCESS) return st;
  if ((st = use_device(stream->device)) != FLAGOS_SUCCESS) return st;
  CUresult r = G().d.cuStreamQuery(stream->cu);
  if (r == CUDA_SUCCESS) return FLAGOS_SUCCESS;
  if (r == CUDA_ERROR_NOT_READY) return FLAGOS_ERROR_NOT_READY;  // not a failure
  return cu_fail(r, "cuStreamQuery");
}

flagos_status_t hal_stream_synchronize(flagos_stream_t stream) {
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = check_stream(stream)) != FLAGOS_SUCCESS) return st;
  if ((st = use_device(stream->device)) != FLAGOS_SUCCESS) return st;
  CU_CALL(cuStreamSynchronize, stream->cu);
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_stream_wait_event(flagos_stream_t stream, flagos_event_t event) {
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = check_stream(stream)) != FLAGOS_SUCCESS) return st;
  if ((st = check_event(event)) != FLAGOS_SUCCESS) return st;
  int ed = event->last_device.load(std::memory_order_acquire);
  if (ed < 0) return FLAGOS_SUCCESS;  // never recorded: counts as complete
  CUevent ce = event->per_device[ed].load(std::memory_order_acquire);
  if ((st = use_device(stream->device)) != FLAGOS_SUCCESS) return st;
  // The event may belong to another device's context: the driver allows that.
  CU_CALL(cuStreamWaitEvent, stream->cu, ce, 0u);
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_stream_get_device(flagos_stream_t stream, int* device) {
  if (!device) return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_get_device: device is NULL");
  flagos_status_t st = check_stream(stream);
  if (st != FLAGOS_SUCCESS) return st;
  *device = stream->device;
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_stream_get_native_handle(flagos_stream_t stream, void** handle) {
  if (!handle)
    return fail(FLAGOS_ERROR_INVALID_VALUE, "stream_get_native_handle: handle is NULL");
  flagos_status_t st = check_stream(stream);
  if (st != FLAGOS_SUCCESS) return st;
  *handle = static_cast<void*>(stream->cu);  // a cudaStream_t; NULL = the legacy default stream
  return FLAGOS_SUCCESS;
}

// ---- events ------------------------------------------------------------------------
flagos_status_t hal_event_create(unsigned int flags, flagos_event_t* event) {
  if (!event) return fail(FLAGOS_ERROR_INVALID_VALUE, "event_create: event is NULL");
  if (flags & ~(FLAGOS_EVENT_DISABLE_TIMING | FLAGOS_EVENT_BLOCKING_SYNC))
    return fail(FLAGOS_ERROR_INVALID_VALUE, "event_create: unknown flags 0x%x", flags);
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  flagos_event_s* e = nullptr;
  {
    HandlePool& hp = pool();
    std::lock_guard<std::mutex> lock(hp.mu);
    if (!hp.free_events.empty()) {
      e = hp.free_events.back();
      hp.free_events.pop_back();
    }
  }
  if (!e) {
    e = new (std::nothrow) flagos_event_s();
    if (!e) return fail(FLAGOS_ERROR_OUT_OF_MEMORY, "event_create: out of host memory");
    int n = G().device_count;
    e->per_device.reset(new (std::nothrow) std::atomic<CUevent>[n]);
    if (!e->per_device) {
      delete e;
      return fail(FLAGOS_ERROR_OUT_OF_MEMORY, "event_create: out of host memory");
    }
    e->slots = n;
    for (int i = 0; i < n; ++i) e->per_device[i].store(nullptr);
  }
  e->flags = flags;
  e->cu_flags = ((flags & FLAGOS_EVENT_DISABLE_TIMING) ? CU_EVENT_DISABLE_TIMING : 0u) |
                ((flags & FLAGOS_EVENT_BLOCKING_SYNC) ? CU_EVENT_BLOCKING_SYNC : 0u);
  e->last_device.store(-1);
  e->alive.store(true, std::memory_order_release);
  *event = e;
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_event_destroy(flagos_event_t event) {
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = check_event(event)) != FLAGOS_SUCCESS) return st;
  bool expected = true;
  if (!event->alive.compare_exchange_strong(expected, false))
    return fail(FLAGOS_ERROR_INVALID_HANDLE, "event_destroy: event already destroyed");
  CUresult first_error = CUDA_SUCCESS;
  for (int i = 0; i < event->slots; ++i) {
    CUevent ce = event->per_device[i].exchange(nullptr);
    if (!ce) continue;
    if (use_device(i) != FLAGOS_SUCCESS) continue;
    // Safe while the event is still pending: the driver frees it once it completes.
    CUresult r = G().d.cuEventDestroy_v2(ce);
    if (r != CUDA_SUCCESS && first_error == CUDA_SUCCESS) first_error = r;
  }
  event->last_device.store(-1);
  {
    HandlePool& hp = pool();
    std::lock_guard<std::mutex> lock(hp.mu);
    hp.free_events.push_back(event);
  }
  if (first_error != CUDA_SUCCESS) return cu_fail(first_error, "cuEventDestroy_v2");
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_event_record(flagos_event_t event, flagos_stream_t stream) {
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = check_event(event)) != FLAGOS_SUCCESS) return st;
  if ((st = check_stream(stream)) != FLAGOS_SUCCESS) return st;
  int dev = stream->device;
  if ((st = use_device(dev)) != FLAGOS_SUCCESS) return st;
  CUevent ce = event->per_device[dev].load(std::memory_order_acquire);
  if (!ce) {
    std::lock_guard<std::mutex> lock(event->create_mu);
    ce = event->per_device[dev].load(std::memory_order_acquire);
    if (!ce) {
      CU_CALL(cuEventCreate, &ce, event->cu_flags);
      event->per_device[dev].store(ce, std::memory_order_release);
    }
  }
  CU_CALL(cuEventRecord, ce, stream->cu);
  event->last_device.store(dev, std::memory_order_release);
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_event_query(flagos_event_t event) {
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = check_event(event)) != FLAGOS_SUCCESS) return st;
  int dev = event->last_device.load(std::memory_order_acquire);
  if (dev < 0) return FLAGOS_SUCCESS;  // never recorded
  if ((st = use_device(dev)) != FLAGOS_SUCCESS) return st;
  CUresult r = G().d.cuEventQuery(event->per_device[dev].load(std::memory_order_acquire));
  if (r == CUDA_SUCCESS) return FLAGOS_SUCCESS;
  if (r == CUDA_ERROR_NOT_READY) return FLAGOS_ERROR_NOT_READY;
  return cu_fail(r, "cuEventQuery");
}

flagos_status_t hal_event_synchronize(flagos_event_t event) {
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = check_event(event)) != FLAGOS_SUCCESS) return st;
  int dev = event->last_device.load(std::memory_order_acquire);
  if (dev < 0) return FLAGOS_SUCCESS;
  if ((st = use_device(dev)) != FLAGOS_SUCCESS) return st;
  CU_CALL(cuEventSynchronize, event->per_device[dev].load(std::memory_order_acquire));
  return FLAGOS_SUCCESS;
}

flagos_status_t hal_event_elapsed_time(float* ms, flagos_event_t start, flagos_event_t end) {
  if (!ms) return fail(FLAGOS_ERROR_INVALID_VALUE, "event_elapsed_time: ms is NULL");
  flagos_status_t st = check_driver();
  if (st != FLAGOS_SUCCESS) return st;
  if ((st = check_event(start)) != FLAGOS_SUCCESS) return st;
  if ((st = check_event(end)) != FLAGOS_SUCCESS) return st;
  if ((start->flags | end->flags) & FLAGOS_EVENT_DISABLE_TIMING)
    return fail(FLAGOS_ERROR_INVALID_HANDLE,
                "event_elapsed_time: %s event was created with FLAGOS_EVENT_DISABLE_TIMING",
                (start->flags & FLAGOS_EVENT_DISABLE_TIMING) ? "the start" : "the end");
  int sd = start->last_device.load(std::memory_order_acquire);
  int ed = end->last_device.load(std::memory_order_acquire);
  if (sd < 0 || ed < 0)
    return fail(FLAGOS_ERROR_INVALID_HANDLE, "event_elapsed_time: the %s event was never recorded",
                sd < 0 ? "start" : "end");
  if (sd != ed)
    return fail(FLAGOS_ERROR_INVALID_VALUE,
                "event_elapsed_time: events were recorded on different devices (%d and %d)", sd,
                ed);
  if ((st = use_device(sd)) != FLAGOS_SUCCESS) return st;
  float v = 0.0f;
  CUresult r = G().d.cuEventElapsedTime(&v, start->per_device[sd].load(std::memory_order_acquire),
                                        end->per_device[ed].load(std::memory_order_acquire));
  if (r == CUDA_ERROR_NOT_READY) return FLAGOS_ERROR_NOT_READY;
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuEventElapsedTime");
  *ms = v;
  return FLAGOS_SUCCESS;
}

flagos_hal_table_t make_table() {
  flagos_hal_table_t t;
  std::memset(&t, 0, sizeof(t));
  t.abi_version = FLAGOS_HAL_ABI_VERSION;
  t.struct_size = static_cast<uint32_t>(sizeof(flagos_hal_table_t));
  t.get_name = hal_get_name;
  t.get_version = hal_get_version;
  t.get_error_string = hal_get_error_string;
  t.get_last_error_message = hal_get_last_error_message;
  t.get_native_device = hal_get_native_device;
  t.get_device_count = hal_get_device_count;
  t.get_device = hal_get_device;
  t.set_device = hal_set_device;
  t.get_device_properties = hal_get_device_properties;
  t.device_synchronize = hal_device_synchronize;
  t.mem_get_info = hal_mem_get_info;
  t.malloc = hal_malloc;
  t.free = hal_free;
  t.host_malloc = hal_host_malloc;
  t.host_free = hal_host_free;
  t.memcpy = hal_memcpy;
  t.memcpy_async = hal_memcpy_async;
  t.memset = hal_memset;
  t.memset_async = hal_memset_async;
  t.pointer_get_attributes = hal_pointer_get_attributes;
  t.stream_create = hal_stream_create;
  t.stream_get_priority_range = hal_stream_get_priority_range;
  t.stream_get_default = hal_stream_get_default;
  t.stream_destroy = hal_stream_destroy;
  t.stream_query = hal_stream_query;
  t.stream_synchronize = hal_stream_synchronize;
  t.stream_wait_event = hal_stream_wait_event;
  t.stream_get_device = hal_stream_get_device;
  t.stream_get_native_handle = hal_stream_get_native_handle;
  t.event_create = hal_event_create;
  t.event_destroy = hal_event_destroy;
  t.event_record = hal_event_record;
  t.event_query = hal_event_query;
  t.event_synchronize = hal_event_synchronize;
  t.event_elapsed_time = hal_event_elapsed_time;
  return t;
}

const flagos_hal_table_t kTable = make_table();

}  // namespace

extern "C" FLAGOS_HAL_EXPORT flagos_status_t flagos_hal_get_table(uint32_t abi_major,
                                                                  const flagos_hal_table_t** out) {
  if (abi_major != FLAGOS_HAL_ABI_MAJOR) return FLAGOS_ERROR_VERSION_MISMATCH;
  if (!out) return FLAGOS_ERROR_INVALID_VALUE;
  *out = &kTable;
  return FLAGOS_SUCCESS;
}

/*
 * flagos HAL: the C ABI a chip vendor implements so that PyTorch runs on its chip.
 *
 * A HAL is a shared library that exports exactly one symbol:
 *
 *     flagos_status_t flagos_hal_get_table(uint32_t abi_major,
 *                                          const flagos_hal_table_t** out);
 *
 * It hands out a table of function pointers. Nothing else is looked up by name,
 * so several HALs (built by different vendors, or two builds of one) can be
 * opened with RTLD_LOCAL in one process without symbol clashes.
 *
 * Versioning. `abi_version` is (major << 16 | minor). A loader accepts a table
 * whose major equals its own FLAGOS_HAL_ABI_MAJOR. Minor versions only append
 * function pointers at the end of the table; `struct_size` says how much of the
 * table the vendor built, so a newer loader never reads past an older vendor's
 * table (see FLAGOS_HAL_HAS()).
 *
 * ABI 1.1 appends the optional graph runtime (graph_*): a HAL whose chip runs whole
 * compiled graphs (an edge NPU whose vendor compiles a model offline) fills them in; a HAL
 * that does not leaves them NULL, and a 1.0 table simply ends before them. Check with
 * FLAGOS_HAL_HAS(table, graph_load) before use.
 *
 * ABI 1.2 appends the optional kernel extension (kernel_*, module_*, function_*,
 * launch_kernel): how a kernel compiled for the chip (by the vendor's Triton backend, or
 * shipped as a binary) reaches it. A HAL that has it fills in all of them; check with
 * FLAGOS_HAL_HAS(table, launch_kernel).
 *
 * ABI 1.3 appends the optional stream capture (stream_*_capture, capture_*, replay_*):
 * the work queued on a stream between two calls is recorded instead of run, and can then
 * be replayed as one launch, any number of times, without the host issuing it again (what
 * CUDA Graphs do). It is not the graph runtime of ABI 1.1: that one runs a model a vendor
 * compiler built; this one repeats a stream's own work. A HAL that has it fills in all of
 * them; check with FLAGOS_HAL_HAS(table, replay_launch).
 *
 * ABI 1.4 appends the optional host tasks (stream_launch_host_task): host work queued on a
 * stream in order with its kernels and copies, and recorded by a capture like them. A HAL
 * whose device memory the host addresses (FLAGOS_NATIVE_CPU) needs it for the CPU kernels
 * that serve such a device to become part of a captured graph; check with
 * FLAGOS_HAL_HAS(table, stream_launch_host_task).
 *
 * ABI 1.5 appends the optional tensor descriptors (kernel_encode_tensor_descriptor): the
 * value a kernel of the chip's Triton backend takes for a tensor descriptor made on the
 * host (Triton's TensorDescriptor; on NVIDIA a TMA descriptor, CUtensorMap). A HAL with
 * the kernel extension whose backend lowers host tensor descriptors to such a value fills
 * it in; check with FLAGOS_HAL_HAS(table, kernel_encode_tensor_descriptor).
 *
 * Conventions.
 *  - Every function returns a flagos_status_t; results come back through
 *    out-parameters, which are left untouched on failure.
 *  - Device indices are the HAL's own: 0 .. device_count-1. The core maps them
 *    onto the global flagos:N indices.
 *  - All functions are thread-safe. "Current device" is per host thread, as in
 *    CUDA.
 *  - Zero-size allocations succeed and return NULL; freeing NULL succeeds.
 *  - After an error, get_last_error_message() on the same thread returns a
 *    human-readable detail (may be "").
 */
#ifndef FLAGOS_HAL_H_
#define FLAGOS_HAL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLAGOS_HAL_ABI_MAJOR 1u
#define FLAGOS_HAL_ABI_MINOR 5u
#define FLAGOS_HAL_ABI_VERSION ((FLAGOS_HAL_ABI_MAJOR << 16) | FLAGOS_HAL_ABI_MINOR)
#define FLAGOS_HAL_ENTRY_SYMBOL "flagos_hal_get_table"

#if defined(_WIN32)
#define FLAGOS_HAL_EXPORT __declspec(dllexport)
#else
#define FLAGOS_HAL_EXPORT __attribute__((visibility("default")))
#endif

typedef enum flagos_status {
  FLAGOS_SUCCESS = 0,
  FLAGOS_ERROR_INVALID_VALUE = 1,   /* a bad argument: NULL out-pointer, bad kind, ... */
  FLAGOS_ERROR_INVALID_DEVICE = 2,  /* device index out of range */
  FLAGOS_ERROR_OUT_OF_MEMORY = 3,   /* the device (or host) allocation cannot be served */
  FLAGOS_ERROR_NOT_READY = 4,       /* query: work is still pending (not a failure) */
  FLAGOS_ERROR_INVALID_HANDLE = 5,  /* unknown stream/event/pointer */
  FLAGOS_ERROR_NOT_SUPPORTED = 6,   /* the HAL does not implement this call */
  FLAGOS_ERROR_NO_DEVICE = 7,       /* no driver or no device present */
  FLAGOS_ERROR_DEVICE_FAULT = 8,    /* the device failed the work (incl. injected faults) */
  FLAGOS_ERROR_VERSION_MISMATCH = 9,/* flagos_hal_get_table: unsupported ABI major */
  FLAGOS_ERROR_UNKNOWN = 999
} flagos_status_t;

/* Which native PyTorch device, if any, can address this HAL's device memory
 * directly (a device pointer is a valid pointer of that device). This is what
 * lets providers run native kernels on flagos memory without a copy. */
typedef enum flagos_native_device {
  FLAGOS_NATIVE_NONE = 0, /* memory is opaque: only the HAL's memcpy can touch it */
  FLAGOS_NATIVE_CPU = 1,  /* device pointers are host pointers (e.g. the simulated device) */
  FLAGOS_NATIVE_CUDA = 2  /* device pointers are CUDA device pointers (same UVA space) */
} flagos_native_device_t;

typedef enum flagos_memcpy_kind {
  FLAGOS_MEMCPY_HOST_TO_HOST = 0,
  FLAGOS_MEMCPY_HOST_TO_DEVICE = 1,
  FLAGOS_MEMCPY_DEVICE_TO_HOST = 2,
  FLAGOS_MEMCPY_DEVICE_TO_DEVICE = 3 /* also between two devices of this HAL */
} flagos_memcpy_kind_t;

typedef enum flagos_pointer_type {
  FLAGOS_POINTER_UNKNOWN = 0, /* not allocated by this HAL (plain host memory) */
  FLAGOS_POINTER_DEVICE = 1,  /* inside a live device allocation */
  FLAGOS_POINTER_PINNED_HOST = 2 /* inside a live host_malloc allocation */
} flagos_pointer_type_t;

/* Event creation flags (bitwise or). */
#define FLAGOS_EVENT_DEFAULT 0u
#define FLAGOS_EVENT_DISABLE_TIMING 1u /* cheaper; elapsed_time on it fails */
#define FLAGOS_EVENT_BLOCKING_SYNC 2u  /* synchronize may sleep instead of spin */

typedef struct flagos_stream_s* flagos_stream_t; /* opaque; owned by the HAL */
typedef struct flagos_event_s* flagos_event_t;   /* opaque; owned by the HAL */

typedef struct flagos_graph_s* flagos_graph_t;   /* opaque; a loaded compiled graph */
typedef struct flagos_module_s* flagos_module_t; /* opaque; a loaded device binary image */
typedef struct flagos_function_s* flagos_function_t; /* opaque; one kernel of a module */
typedef struct flagos_capture_s* flagos_capture_t; /* opaque; the work a stream capture recorded */
typedef struct flagos_replay_s* flagos_replay_t;   /* opaque; a capture made launchable */

/* Element types of graph inputs and outputs. */
typedef enum flagos_dtype {
  FLAGOS_DTYPE_FLOAT32 = 0,
  FLAGOS_DTYPE_FLOAT16 = 1,
  FLAGOS_DTYPE_BFLOAT16 = 2,
  FLAGOS_DTYPE_INT64 = 3,
  FLAGOS_DTYPE_INT32 = 4,
  FLAGOS_DTYPE_INT8 = 5,
  FLAGOS_DTYPE_UINT8 = 6,
  FLAGOS_DTYPE_BOOL = 7
} flagos_dtype_t;

#define FLAGOS_GRAPH_MAX_DIMS 8

/* One input or output of a loaded graph: a dense row-major tensor of a static shape. */
typedef struct flagos_graph_tensor_info {
  uint32_t struct_size;  /* caller sets sizeof(flagos_graph_tensor_info_t); the HAL writes at
                            most that many bytes */
  char name[64];         /* the name the artifact gives it (NUL-terminated, may be cut) */
  flagos_dtype_t dtype;
  int32_t ndim;          /* 0 .. FLAGOS_GRAPH_MAX_DIMS */
  int64_t shape[FLAGOS_GRAPH_MAX_DIMS];
  uint64_t size_bytes;   /* product of shape times the element size */
} flagos_graph_tensor_info_t;

/* What a device is as a target of kernel compilers (the kernel extension): what flagos
 * asks the installed Triton to compile for, and the limits a launch must respect. */
typedef struct flagos_kernel_target {
  uint32_t struct_size;    /* caller sets sizeof(flagos_kernel_target_t); the HAL writes at
                              most that many bytes */
  char backend[32];        /* the Triton backend that compiles for it ("cuda", "hip", a
                              vendor's own); "" when no Triton backend targets it */
  char arch[64];           /* that backend's architecture name ("90" for sm_90, "gfx942") */
  int32_t warp_size;       /* threads per warp (32 on NVIDIA); 1 where kernels are not SIMT */
  uint32_t max_threads_per_block;   /* the product of a launch's block dimensions */
  uint64_t max_shared_memory;       /* dynamic shared memory a launch may ask for, in bytes,
                                       once function_set_shared_memory has allowed it */
} flagos_kernel_target_t;

/* A tensor in device memory as a kernel reads and writes it in tiles (the tensor
 * descriptors of ABI 1.5): the tensor, the tile, and the codes the device's Triton backend
 * gives the element type and the shared memory layout (Triton's tensordesc_meta
 * elem_type and swizzle, after its backend's own mapping: CUtensorMapDataType and
 * CUtensorMapSwizzle on the cuda HAL). Dimensions go outermost first, as in PyTorch. */
#define FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS 5
typedef struct flagos_tensor_descriptor_info {
  uint32_t struct_size;   /* caller sets sizeof(flagos_tensor_descriptor_info_t) */
  int32_t ndim;           /* 1 .. FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS */
  uint64_t base;          /* device address of element (0, .., 0), on the device named */
  uint64_t shape[FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS];   /* elements per dimension */
  int64_t strides[FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS];  /* in elements; the innermost is 1 */
  uint32_t block_shape[FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS]; /* the tile, elements per dim */
  uint32_t element_size;  /* bytes per element: 1, 2, 4 or 8 */
  int32_t element_type;   /* the backend's code of the element type */
  int32_t swizzle;        /* the backend's code of the tile's layout in shared memory */
  int32_t fill_nan;       /* elements of a tile outside the tensor read as NaN (1), 0 (0) */
} flagos_tensor_descriptor_info_t;

typedef struct flagos_device_properties {
  uint32_t struct_size;        /* caller sets sizeof(flagos_device_properties_t) */
  char name[256];              /* e.g. "NVIDIA H200", "flagos-sim" */
  uint64_t total_memory;       /* bytes */
  int32_t compute_units;       /* SMs, cores, AI cores, ... */
  int32_t native_device_index; /* index of the twin native device (cuda:N), -1 if none */
  int32_t major;               /* vendor's architecture version, 0 if meaningless */
  int32_t minor;
} flagos_device_properties_t;

typedef struct flagos_pointer_attributes {
  flagos_pointer_type_t type;
  int32_t device;   /* owning device for FLAGOS_POINTER_DEVICE, else -1 */
  void* base;       /* start of the allocation holding the pointer, or NULL */
  size_t size;      /* size of that allocation in bytes, or 0 */
} flagos_pointer_attributes_t;

typedef struct flagos_hal_table {
  uint32_t abi_version; /* FLAGOS_HAL_ABI_VERSION the vendor built against */
  uint32_t struct_size; /* sizeof(flagos_hal_table_t) the vendor built */

  /* ---- identity and capabilities ---------------------------------------- */
  /* Short lowercase HAL name ("sim", "cuda", "ascend"); static storage. */
  flagos_status_t (*get_name)(const char** name);
  /* Vendor's own version string (driver/runtime versions); static storage. */
  flagos_status_t (*get_version)(const char** version);
  /* Text for a status code; static storage. Unknown codes give "unknown error". */
  flagos_status_t (*get_error_string)(flagos_status_t status, const char** text);
  /* Detail of the last failed call on this thread ("" if none); thread-local storage
   * valid until the next HAL call on this thread. */
  flagos_status_t (*get_last_error_message)(const char** text);
  /* Which native torch device can address device memory (see flagos_native_device_t). */
  flagos_status_t (*get_native_device)(flagos_native_device_t* kind);

  /* ---- devices ------------------------------------------------------------ */
  /* Number of devices; 0 with FLAGOS_SUCCESS when the driver is absent. */
  flagos_status_t (*get_device_count)(int* count);
  /* Current device of the calling thread (0 initially). */
  flagos_status_t (*get_device)(int* device);
  /* Make `device` current for the calling thread; INVALID_DEVICE if out of range. */
  flagos_status_t (*set_device)(int device);
  /* Fill `props` (caller sets props->struct_size; the HAL writes at most that much). */
  flagos_status_t (*get_device_properties)(int device, flagos_device_properties_t* props);
  /* Block until all work on every stream of `device` has finished. */
  flagos_status_t (*device_synchronize)(int device);
  /* Free and total device memory in bytes, as the device sees it. */
  flagos_status_t (*mem_get_info)(int device, size_t* free_bytes, size_t* total_bytes);

  /* ---- memory ------------------------------------------------------------- */
  /* Allocate `size` bytes on `device`, aligned to at least 256 bytes.
   * size 0 -> *ptr = NULL and SUCCESS. Not enough memory -> OUT_OF_MEMORY
   * (never a crash, never an abort), *ptr untouched. */
  flagos_status_t (*malloc)(int device, size_t size, void** ptr);
  /* Free a pointer returned by malloc on `device`. NULL is a no-op.
   * A pointer this HAL did not hand out -> INVALID_HANDLE (not a crash).
   * The caller guarantees no pending work uses it (sync or stream-ordered by the core). */
  flagos_status_t (*free)(int device, void* ptr);
  /* Page-locked host memory usable for truly asynchronous copies. */
  flagos_status_t (*host_malloc)(size_t size, void** ptr);
  flagos_status_t (*host_free)(void* ptr);
  /* Synchronous copy: returns after the bytes have arrived; ordered after all
   * work previously queued on the default stream of the devices involved. */
  flagos_status_t (*memcpy)(void* dst, const void* src, size_t size, flagos_memcpy_kind_t kind);
  /* Asynchronous copy queued on `stream`. The host side of a HOST_TO_DEVICE /
   * DEVICE_TO_HOST copy must stay valid until the stream reaches the copy. */
  flagos_status_t (*memcpy_async)(void* dst, const void* src, size_t size,
                                  flagos_memcpy_kind_t kind, flagos_stream_t stream);
  /* Set `size` bytes of device memory at `ptr` to (unsigned char)value. */
  flagos_status_t (*memset)(void* ptr, int value, size_t size);
  flagos_status_t (*memset_async)(void* ptr, int value, size_t size, flagos_stream_t stream);
  /* What `ptr` is: device memory (and which device), pinned host memory, or unknown. */
  flagos_status_t (*pointer_get_attributes)(const void* ptr, flagos_pointer_attributes_t* attr);

  /* ---- streams ------------------------------------------------------------ */
  /* Create a stream on `device`. Lower numbers are higher priority (as CUDA);
   * `priority` is clamped into the range of get_stream_priority_range. */
  flagos_status_t (*stream_create)(int device, int priority, flagos_stream_t* stream);
  /* Least (lowest priority, usually 0) and greatest (highest, most negative) priorities. */
  flagos_status_t (*stream_get_priority_range)(int* least, int* greatest);
  /* The default stream of `device`: never destroyed, valid for the process lifetime. */
  flagos_status_t (*stream_get_default)(int device, flagos_stream_t* stream);
  /* Destroy after its queued work finishes; the default stream cannot be destroyed. */
  flagos_status_t (*stream_destroy)(flagos_stream_t stream);
  /* SUCCESS when all queued work is done, NOT_READY otherwise. */
  flagos_status_t (*stream_query)(flagos_stream_t stream);
  /* Block the host until all work queued on this one stream is done. */
  flagos_status_t (*stream_synchronize)(flagos_stream_t stream);
  /* Work queued on `stream` after this call waits until `event` has completed
   * (the last record of `event` at the time of this call). Does not block the host. */
  flagos_status_t (*stream_wait_event)(flagos_stream_t stream, flagos_event_t event);
  /* Device of a stream. */
  flagos_status_t (*stream_get_device)(flagos_stream_t stream, int* device);
  /* The native twin's stream handle (a cudaStream_t for CUDA HALs), or NULL. */
  flagos_status_t (*stream_get_native_handle)(flagos_stream_t stream, void** handle);

  /* ---- events ------------------------------------------------------------- */
  /* Create an event with FLAGOS_EVENT_* flags. An event never recorded counts as complete. */
  flagos_status_t (*event_create)(unsigned int flags, flagos_event_t* event);
  flagos_status_t (*event_destroy)(flagos_event_t event);
  /* Capture the work queued on `stream` so far; re-recording replaces the capture. */
  flagos_status_t (*event_record)(flagos_event_t event, flagos_stream_t stream);
  /* SUCCESS when the captured work has completed, NOT_READY otherwise. */
  flagos_status_t (*event_query)(flagos_event_t event);
  /* Block the host until the captured work has completed. */
  flagos_status_t (*event_synchronize)(flagos_event_t event);
  /* Milliseconds between two completed, timing-enabled events (end - start).
   * NOT_READY if either has not completed; INVALID_HANDLE if timing is disabled. */
  flagos_status_t (*event_elapsed_time)(float* ms, flagos_event_t start, flagos_event_t end);

  /* ---- graph runtime (ABI 1.1, optional: NULL when the chip runs no compiled graphs) ---
   * A graph is an artifact that the HAL's graph compiler (a separate, offline toolchain,
   * found through the Python entry point group `flagos.graph_compiler`) produced from an
   * exchange format (ONNX). The runtime loads it onto one device (weights included) and
   * executes it on caller-owned device buffers, on a stream, like any other device work. */
  /* The artifact formats graph_load accepts, comma-separated ("acme-npu-v2,acme-npu-v3");
   * static storage. */
  flagos_status_t (*graph_get_formats)(const char** formats);
  /* Load an artifact of `format` (one of graph_get_formats) onto `device`; the bytes are
   * copied, the caller may free them on return. An unknown format is NOT_SUPPORTED; a
   * malformed or truncated artifact is INVALID_VALUE, with the detail in the last-error
   * message. Synchronous; the graph is usable on any stream of `device`. */
  flagos_status_t (*graph_load)(int device, const char* format, const void* artifact, size_t size,
                                flagos_graph_t* graph);
  /* How many inputs and outputs the graph has, and how many bytes of device scratch memory
   * one execution needs (0 if none). */
  flagos_status_t (*graph_get_info)(flagos_graph_t graph, int* num_inputs, int* num_outputs,
                                    size_t* workspace_size);
  /* Describe input (`is_output` 0) or output (1) number `index`: name, dtype, static shape.
   * An index out of range is INVALID_VALUE. */
  flagos_status_t (*graph_get_tensor_info)(flagos_graph_t graph, int is_output, int index,
                                           flagos_graph_tensor_info_t* info);
  /* Queue one execution on `stream` (a stream of the graph's device) and return: it reads
   * `inputs` and writes `outputs` (device pointers of dense tensors as graph_get_tensor_info
   * describes them, counts as graph_get_info gives) when the stream reaches it, in order with
   * the stream's other work. `workspace` is device memory of at least workspace_size bytes
   * (NULL when 0), used only by this execution: the caller keeps it, the inputs and the
   * outputs alive and unchanged until the stream passes the execution. Outputs must not
   * overlap inputs. A count, pointer or stream that does not fit is INVALID_VALUE (or
   * INVALID_HANDLE) and nothing is queued. */
  flagos_status_t (*graph_execute)(flagos_graph_t graph, const void* const* inputs, int num_inputs,
                                   void* const* outputs, int num_outputs, void* workspace,
                                   flagos_stream_t stream);
  /* Release a graph and its device memory once its queued executions have finished. */
  flagos_status_t (*graph_destroy)(flagos_graph_t graph);

  /* ---- kernel extension (ABI 1.2, optional: NULL when kernels cannot be loaded) -------
   * A module is a device binary image (a cubin, a vendor's ELF, the simulator's host
   * library of kernels) loaded onto one device; a function is one of its kernels, launched
   * on a stream of that device with a grid of blocks and its argument values, in order
   * with the stream's other work. Handles of functions stay valid until their module is
   * unloaded. */
  /* The image formats module_load accepts, comma-separated ("cubin,ptx"); static storage. */
  flagos_status_t (*kernel_get_formats)(const char** formats);
  /* What `device` is as a compiler target (caller sets target->struct_size). */
  flagos_status_t (*kernel_get_target)(int device, flagos_kernel_target_t* target);
  /* Load an image of `format` (one of kernel_get_formats) onto `device`; the bytes are
   * copied, the caller may free them on return. An unknown format is NOT_SUPPORTED; an
   * image the device cannot load (malformed, or built for another target) is
   * INVALID_VALUE with the detail in the last-error message. Synchronous. */
  flagos_status_t (*module_load)(int device, const char* format, const void* image, size_t size,
                                 flagos_module_t* module);
  /* The kernel named `name` (its symbol in the image). No such kernel is INVALID_VALUE. */
  flagos_status_t (*module_get_function)(flagos_module_t module, const char* name,
                                         flagos_function_t* function);
  /* Allow launches of `function` to ask for up to `bytes` of dynamic shared memory (what
   * Triton sets when a kernel needs more than the default). Over the device's
   * max_shared_memory is INVALID_VALUE. */
  flagos_status_t (*function_set_shared_memory)(flagos_function_t function, size_t bytes);
  /* Queue one launch of `function` on `stream` (a stream of the function's device) and
   * return. grid: blocks in x, y, z (each >= 1); block: threads per block in x, y, z (each
   * >= 1, product <= max_threads_per_block); shared_memory: dynamic shared memory bytes
   * per block. args[i] points to the value of argument i (as CUDA's kernelParams), of
   * arg_sizes[i] bytes; the values are copied before the call returns. A launch that does
   * not fit (a zero dimension, too many threads or bytes of shared memory, argument count
   * or sizes the kernel does not take where the HAL knows them, a stream of another
   * device) is INVALID_VALUE and nothing is queued. A kernel that faults on the device
   * is reported as the runtime reports it (DEVICE_FAULT at the next synchronization). */
  flagos_status_t (*launch_kernel)(flagos_function_t function, const uint32_t grid[3],
                                   const uint32_t block[3], size_t shared_memory,
                                   void* const* args, const size_t* arg_sizes, int num_args,
                                   flagos_stream_t stream);
  /* Release a module and its functions once their queued launches have finished. */
  flagos_status_t (*module_unload)(flagos_module_t module);
  /* ---- stream capture (ABI 1.3, optional: NULL when work cannot be captured) ----------
   * Between stream_begin_capture and stream_end_capture, the copies (memcpy_async),
   * memsets (memset_async) and kernel launches queued on a stream are recorded, not run;
   * the HAL may record more (events, host functions) and refuses with NOT_SUPPORTED what it
   * cannot. A capture records work, not values: a replay reads and writes the same
   * addresses, so the caller keeps every buffer the work uses alive, and rewrites inputs in
   * place, while replays may run. Only a stream the caller created can capture (not a
   * default stream). While it captures, a call that would wait for it or ask about its work
   * (stream_query, stream_synchronize, device_synchronize of its device, a wait on work
   * outside the capture) fails with INVALID_VALUE and invalidates the capture: its
   * stream_end_capture then fails too, and the stream no longer captures. malloc and
   * host_malloc stay legal meanwhile, on any thread (a graph's memory grows during its
   * capture); they are not recorded. Several streams of a device may capture at once, on
   * one thread: ending, instantiating and destroying one capture stays legal while another
   * records. */
  /* Start recording the work queued on `stream`. A stream already capturing, or a default
   * stream, is INVALID_VALUE. */
  flagos_status_t (*stream_begin_capture)(flagos_stream_t stream);
  /* Stop recording and return what was recorded (possibly nothing). A stream that is not
   * capturing is INVALID_VALUE; an invalidated capture is INVALID_VALUE, with the call that
   * invalidated it in the last-error message, and returns nothing. */
  flagos_status_t (*stream_end_capture)(flagos_stream_t stream, flagos_capture_t* capture);
  /* *capturing = 1 while `stream` records, else 0. */
  flagos_status_t (*stream_is_capturing)(flagos_stream_t stream, int* capturing);
  /* Make a capture launchable; the capture itself stays valid (instantiate it again, or
   * destroy it). */
  flagos_status_t (*capture_instantiate)(flagos_capture_t capture, flagos_replay_t* replay);
  flagos_status_t (*capture_destroy)(flagos_capture_t capture);
  /* Queue the recorded work once on `stream` (a stream of the device it was captured on,
   * any of them) and return: it runs in the recorded order, in order with the stream's
   * other work. A stream of another device is INVALID_VALUE. */
  flagos_status_t (*replay_launch)(flagos_replay_t replay, flagos_stream_t stream);
  /* Release a replay once its queued launches have finished. */
  flagos_status_t (*replay_destroy)(flagos_replay_t replay);
  /* ---- host tasks (ABI 1.4, optional: NULL when the HAL runs no host work on a stream) --
   * Queue fn(data) on `stream`, after the work queued so far; the stream's later work runs
   * after it returns. While the stream captures, the call is recorded instead, and
   * fn(data) runs at each replay of the capture. release(data) (NULL: none) runs exactly
   * once, when no run of fn can come any more: after its one run, or once the capture and
   * every replay holding it are destroyed and their queued runs are done; also when the
   * call fails. fn runs on a thread of the HAL's and must not wait for its own stream.
   * A destroyed stream is INVALID_HANDLE, a NULL fn INVALID_VALUE. */
  flagos_status_t (*stream_launch_host_task)(flagos_stream_t stream, void (*fn)(void* data),
                                             void* data, void (*release)(void* data));
  /* ---- tensor descriptors (ABI 1.5, optional: NULL when the backend takes none) -------
   * Encode `info` (caller sets info->struct_size) for a kernel on `device`: the bytes a
   * launch_kernel argument of that kernel's tensor descriptor type takes by value (args[i]
   * points to them, arg_sizes[i] is their size). *size is the capacity of `descriptor` on
   * entry and the bytes written on return; a capacity too small is INVALID_VALUE with the
   * bytes needed in *size. A tensor or tile the device cannot describe (a dimension count,
   * an unaligned base or stride, a tile too large, an unknown code) is INVALID_VALUE with
   * the reason in the last-error message. The descriptor embeds `base`: it is valid while
   * that memory is. Synchronous; no device work. */
  flagos_status_t (*kernel_encode_tensor_descriptor)(int device,
                                                     const flagos_tensor_descriptor_info_t* info,
                                                     void* descriptor, size_t* size);
  /* Add new functions here, after the last one, and bump FLAGOS_HAL_ABI_MINOR. */
} flagos_hal_table_t;

/* True when `table` (built by a vendor) contains the function `field`. */
#define FLAGOS_HAL_HAS(table, field)                                              \
  ((table)->struct_size >= offsetof(flagos_hal_table_t, field) + sizeof((table)->field) && \
   (table)->field != NULL)

/* The one symbol a HAL library exports. Returns VERSION_MISMATCH (and leaves *out
 * untouched) when it cannot serve `abi_major`. */
typedef flagos_status_t (*flagos_hal_get_table_fn)(uint32_t abi_major,
                                                    const flagos_hal_table_t** out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLAGOS_HAL_H_ */

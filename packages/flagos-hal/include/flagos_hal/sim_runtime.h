/*
 * The simulated device's runtime stream: what the sim HAL hands out as a stream's native
 * handle (stream_get_native_handle), as a CUDA HAL hands out a cudaStream_t.
 *
 * A kernel library written for the simulated device (flagos-ops-native's reference
 * library) launches its kernels with launch_host_func: fn(data) runs on the stream's
 * worker thread, in order with the copies, memsets and event records queued on that
 * stream, exactly as a real device runs a kernel queued on its stream. Kernels then
 * read and write device memory only from the stream, never from the calling thread.
 *
 * launch_host_func's fn runs once and may free its data; launch_host_task's fn may run
 * again at each replay of a capture, and its data is released separately.
 *
 * The struct lives as long as its stream; `struct_size` lets fields be appended.
 *
 * `control` (present when struct_size covers it) is the simulator's test control: fault
 * injection at run time, for tests that fail HAL calls one after another in one process,
 * and the count of live streams and events, for leak checks; the same for every stream of
 * the library.
 */
#ifndef FLAGOS_HAL_SIM_RUNTIME_H_
#define FLAGOS_HAL_SIM_RUNTIME_H_

#include <stdint.h>

#include "flagos_hal/flagos_hal.h"
#include "flagos_hal/test_control.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The simulator's test control: the kit's (flagos_hal/test_control.h), also reachable
 * through every sim stream. */
typedef flagos_hal_test_control_t flagos_hal_sim_control_t;

typedef struct flagos_hal_sim_stream {
  uint32_t struct_size;  /* sizeof(flagos_hal_sim_stream_t) the HAL was built with */
  flagos_stream_t stream; /* the HAL stream this runtime stream belongs to */
  /* Queue fn(data) on the stream, after the work queued so far. Returns INVALID_HANDLE
   * (and never runs fn) when the stream has been destroyed. */
  flagos_status_t (*launch_host_func)(const struct flagos_hal_sim_stream* self,
                                      void (*fn)(void* data), void* data);
  const flagos_hal_sim_control_t* control; /* the test control, never NULL */
  /* Queue fn(data) on the stream like launch_host_func, for work that may run more than
   * once: while the stream captures (flagos_hal.h stream capture), the call is recorded
   * and fn(data) runs at each replay instead. release(data) (NULL: none) runs exactly once,
   * when no run of fn can come any more: after the one run, or once the capture and every
   * replay holding it are destroyed and their queued runs done; also when the call fails.
   * INVALID_HANDLE for a destroyed stream. Present when struct_size covers it. */
  flagos_status_t (*launch_host_task)(const struct flagos_hal_sim_stream* self,
                                      void (*fn)(void* data), void* data,
                                      void (*release)(void* data));
} flagos_hal_sim_stream_t;

/*
 * Kernels for the simulated device (the kernel extension, flagos_hal.h ABI 1.2). The
 * format FLAGOS_SIM_KERNEL_FORMAT is a host shared library (ELF, built for the machine)
 * that exports FLAGOS_SIM_KERNELS_SYMBOL: an array of flagos_hal_sim_kernel_t ended by an
 * entry whose name is NULL. A launch runs `fn` once per program of the grid (x fastest,
 * then y, then z) on the stream's worker, in order with the stream's other work, as one
 * task. `args[i]` points to argument i's value (kernelParams, as on CUDA): a device
 * pointer argument is read as `*(float**)args[i]`. Threads of a block are not simulated:
 * a program is one call, and `block` is only passed along. `shared_memory` is
 * `shared_memory_size` bytes of scratch, zeroed, private to the call.
 */
#define FLAGOS_SIM_KERNEL_FORMAT "flagos-sim-kernels-v1"
#define FLAGOS_SIM_KERNELS_SYMBOL "flagos_sim_kernels"

/* A tensor descriptor on the simulated device (kernel_encode_tensor_descriptor, ABI 1.5):
 * the value a sim kernel's descriptor argument receives (arg_size sizeof this struct).
 * The fields are the encoded info's; element_type and swizzle are 0 (the sim has no
 * codes of its own). */
typedef struct flagos_hal_sim_tensor_descriptor {
  uint64_t base;
  int32_t ndim;
  uint32_t element_size;
  uint64_t shape[FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS];
  int64_t strides[FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS];
  uint32_t block_shape[FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS];
  int32_t fill_nan;
} flagos_hal_sim_tensor_descriptor_t;

typedef struct flagos_hal_sim_program {
  uint32_t grid[3];        /* the launch's grid */
  uint32_t block[3];       /* the launch's block */
  uint32_t program_id[3];  /* this call's position in the grid */
  void* shared_memory;
  size_t shared_memory_size;
} flagos_hal_sim_program_t;

typedef struct flagos_hal_sim_kernel {
  const char* name;  /* what module_get_function finds it by; NULL ends the array */
  void (*fn)(const flagos_hal_sim_program_t* program, void* const* args);
  int32_t num_args;          /* arguments it takes; -1: not checked */
  const size_t* arg_sizes;   /* bytes of each argument (num_args entries) */
} flagos_hal_sim_kernel_t;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLAGOS_HAL_SIM_RUNTIME_H_ */

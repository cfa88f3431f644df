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
} flagos_hal_sim_stream_t;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLAGOS_HAL_SIM_RUNTIME_H_ */

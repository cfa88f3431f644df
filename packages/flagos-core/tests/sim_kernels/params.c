/* A kernel library for the simulated device (format flagos-sim-kernels-v1), built by
 * test_launch_params.py: echo writes the bits of each of its parameters after the first
 * (one of every size a launch passes) to out[0..9], zero-extended, so a test reads back
 * exactly what a launcher packed. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "flagos_hal/sim_runtime.h"

static const size_t echo_args[] = {sizeof(void*), 1, 2, 4, 8, 2, 2, 4, 8, sizeof(void*)};
#define N_ECHO (sizeof echo_args / sizeof echo_args[0])

static void echo(const flagos_hal_sim_program_t* p, void* const* args) {
  if (p->program_id[0] != 0) return;
  uint64_t* out = *(uint64_t* const*)args[0];
  for (size_t i = 1; i < N_ECHO; ++i) {
    uint64_t bits = 0;
    memcpy(&bits, args[i], echo_args[i]); /* little-endian: the low bytes */
    out[i - 1] = bits;
  }
}

__attribute__((visibility("default"))) const flagos_hal_sim_kernel_t flagos_sim_kernels[] = {
    {"echo", echo, N_ECHO, echo_args},
    {NULL, NULL, 0, NULL},
};

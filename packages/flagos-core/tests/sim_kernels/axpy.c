/* A kernel library for the simulated device (format flagos-sim-kernels-v1), built by
 * test_hal_kernels.py: out[i] = alpha * x[i] + y[i] for i < n, one block of block[0]
 * elements per program. */
#include <stddef.h>
#include <stdint.h>

#include "flagos_hal/sim_runtime.h"

static void axpy(const flagos_hal_sim_program_t* p, void* const* args) {
  const float* x = *(const float* const*)args[0];
  const float* y = *(const float* const*)args[1];
  float* out = *(float* const*)args[2];
  float alpha = *(const float*)args[3];
  int64_t n = *(const int64_t*)args[4];
  for (uint32_t t = 0; t < p->block[0]; ++t) {
    int64_t i = (int64_t)p->program_id[0] * p->block[0] + t;
    if (i < n) out[i] = alpha * x[i] + y[i];
  }
}

static const size_t axpy_args[] = {sizeof(void*), sizeof(void*), sizeof(void*), sizeof(float),
                                   sizeof(int64_t)};

__attribute__((visibility("default"))) const flagos_hal_sim_kernel_t flagos_sim_kernels[] = {
    {"axpy", axpy, 5, axpy_args},
    {NULL, NULL, 0, NULL},
};

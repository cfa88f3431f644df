/* A kernel library for the simulated device (format flagos-sim-kernels-v1), built by
 * test_triton_tensor_descriptors.py: each kernel writes to `out` (row-major, the tile's
 * shape) the tile of a 2-d float32 tensor at (row, col), elements outside the tensor read
 * as 0, or NaN where the descriptor's padding says so. They take the tensor as Triton's
 * CUDA backend passes a host tensor descriptor:
 *   tile_by_descriptor: the encoded descriptor (by value), its shape (i32) and strides (i64);
 *   tile_by_pointer: base, shape and strides (i64), padding (i1), shape (i32), strides (i64),
 *                    for a 4 x 4 tile (a tile size the compiled kernel holds). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "flagos_hal/sim_runtime.h"

static void copy_tile(const float* base, const int64_t shape[2], const int64_t strides[2], uint32_t rows,
                      uint32_t cols, int nan_fill, int64_t row, int64_t col, float* out) {
  for (uint32_t i = 0; i < rows; ++i) {
    for (uint32_t j = 0; j < cols; ++j) {
      int64_t r = row + i, c = col + j;
      int inside = r >= 0 && c >= 0 && r < shape[0] && c < shape[1];
      out[i * cols + j] = inside ? base[r * strides[0] + c * strides[1]] : nan_fill ? NAN : 0.0f;
    }
  }
}

static void tile_by_descriptor(const flagos_hal_sim_program_t* p, void* const* args) {
  const flagos_hal_sim_tensor_descriptor_t* d = (const flagos_hal_sim_tensor_descriptor_t*)args[0];
  int64_t shape[2] = {*(const int32_t*)args[1], *(const int32_t*)args[2]};
  int64_t strides[2] = {*(const int64_t*)args[3], *(const int64_t*)args[4]};
  float* out = *(float* const*)args[5];
  int64_t row = *(const int64_t*)args[6], col = *(const int64_t*)args[7];
  if (p->program_id[0] != 0 || d->ndim != 2) return;
  /* the shape and strides after the descriptor repeat what it holds */
  if (shape[0] != (int64_t)d->shape[0] || strides[0] != d->strides[0]) return;
  copy_tile((const float*)(uintptr_t)d->base, shape, strides, d->block_shape[0], d->block_shape[1],
            d->fill_nan, row, col, out);
}

static void tile_by_pointer(const flagos_hal_sim_program_t* p, void* const* args) {
  const float* base = *(const float* const*)args[0];
  int64_t shape[2] = {*(const int64_t*)args[1], *(const int64_t*)args[2]};
  int64_t strides[2] = {*(const int64_t*)args[3], *(const int64_t*)args[4]};
  int nan_fill = *(const int8_t*)args[5];
  float* out = *(float* const*)args[10];
  int64_t row = *(const int64_t*)args[11], col = *(const int64_t*)args[12];
  if (p->program_id[0] != 0) return;
  copy_tile(base, shape, strides, 4, 4, nan_fill, row, col, out);
}

static const size_t by_descriptor_args[] = {sizeof(flagos_hal_sim_tensor_descriptor_t), 4, 4, 8, 8,
                                            sizeof(void*), 8, 8};
static const size_t by_pointer_args[] = {sizeof(void*), 8, 8, 8, 8, 1, 4, 4, 8, 8, sizeof(void*), 8, 8};

__attribute__((visibility("default"))) const flagos_hal_sim_kernel_t flagos_sim_kernels[] = {
    {"tile_by_descriptor", tile_by_descriptor, 8, by_descriptor_args},
    {"tile_by_pointer", tile_by_pointer, 13, by_pointer_args},
    {NULL, NULL, 0, NULL},
};

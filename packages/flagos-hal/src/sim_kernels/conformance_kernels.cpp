// The kernels the conformance suite launches on the simulated device (format
// flagos-sim-kernels-v1, flagos_hal/sim_runtime.h). Each does what its PTX twin in
// python/flagos_hal/kernel_checks.py does on CUDA: one program is one block, and a
// program runs its block's block[0] threads as a loop.
#include <stddef.h>
#include <stdint.h>

#include "flagos_hal/sim_runtime.h"

namespace {

template <class T>
T arg(void* const* args, int i) {
  return *static_cast<T*>(args[i]);
}

// out[i] = a[i] + b[i] for i < n (float32).
void vector_add(const flagos_hal_sim_program_t* p, void* const* args) {
  const float* a = arg<const float*>(args, 0);
  const float* b = arg<const float*>(args, 1);
  float* out = arg<float*>(args, 2);
  int64_t n = arg<int64_t>(args, 3);
  for (uint32_t t = 0; t < p->block[0]; ++t) {
    int64_t i = int64_t(p->program_id[0]) * p->block[0] + t;
    if (i < n) out[i] = a[i] + b[i];
  }
}

// out[program] = the program's linear index in the grid, x fastest (uint32).
void program_ids(const flagos_hal_sim_program_t* p, void* const* args) {
  uint32_t* out = arg<uint32_t*>(args, 0);
  uint32_t linear = (p->program_id[2] * p->grid[1] + p->program_id[1]) * p->grid[0] + p->program_id[0];
  if (p->program_id[0] == 0 && p->program_id[1] == 0 && p->program_id[2] == 0 && p->shared_memory_size) {
    // the shared memory is zeroed and writable
    static_cast<unsigned char*>(p->shared_memory)[p->shared_memory_size - 1] = 1;
  }
  out[linear] = linear;
}

// out = the tile of the 2-d float32 tensor described by `desc` whose first element is at
// (row, col): block_shape[0] x block_shape[1] elements, row-major, those outside the
// tensor 0 or NaN as the descriptor says. One program copies the whole tile.
void tile_load(const flagos_hal_sim_program_t* p, void* const* args) {
  const auto& desc = *static_cast<const flagos_hal_sim_tensor_descriptor_t*>(args[0]);
  float* out = arg<float*>(args, 1);
  int64_t row = arg<int64_t>(args, 2), col = arg<int64_t>(args, 3);
  if (p->program_id[0] != 0 || desc.ndim != 2 || desc.element_size != 4) return;
  const float* base = reinterpret_cast<const float*>(static_cast<uintptr_t>(desc.base));
  float fill = desc.fill_nan ? __builtin_nanf("") : 0.0f;
  for (uint32_t i = 0; i < desc.block_shape[0]; ++i) {
    for (uint32_t j = 0; j < desc.block_shape[1]; ++j) {
      int64_t r = row + i, c = col + j;
      bool inside = r >= 0 && c >= 0 && uint64_t(r) < desc.shape[0] && uint64_t(c) < desc.shape[1];
      out[i * desc.block_shape[1] + j] = inside ? base[r * desc.strides[0] + c * desc.strides[1]] : fill;
    }
  }
}

const size_t kVectorAddArgs[] = {sizeof(void*), sizeof(void*), sizeof(void*), sizeof(int64_t)};
const size_t kProgramIdsArgs[] = {sizeof(void*)};
const size_t kTileLoadArgs[] = {sizeof(flagos_hal_sim_tensor_descriptor_t), sizeof(void*), sizeof(int64_t),
                                sizeof(int64_t)};

}  // namespace

extern "C" __attribute__((visibility("default"))) const flagos_hal_sim_kernel_t flagos_sim_kernels[] = {
    {"vector_add", vector_add, 4, kVectorAddArgs},
    {"program_ids", program_ids, 1, kProgramIdsArgs},
    {"tile_load", tile_load, 4, kTileLoadArgs},
    {nullptr, nullptr, 0, nullptr},
};

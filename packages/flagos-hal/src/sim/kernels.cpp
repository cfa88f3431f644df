// The simulated device's kernel extension (flagos_hal.h "kernel extension"): images of the
// format flagos-sim-kernels-v1 are host shared libraries of C kernels (sim_runtime.h),
// loaded with dlopen from an anonymous file; a launch runs the kernel once per program of
// its grid as one task on the stream's worker thread, in order with the stream's copies,
// fills, event records and other kernels.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "sim.hpp"

namespace flagos_sim {
namespace {

constexpr size_t kMaxKernels = 4096;
constexpr int kMaxArgs = 256;

// An anonymous file holding `image`, for dlopen; -1 with the reason in `why`.
int image_file(const void* image, size_t size, std::string* why) {
  int fd = memfd_create("flagos-sim-kernels", MFD_CLOEXEC);
  if (fd < 0) {
    *why = std::string("memfd_create failed: ") + std::strerror(errno);
    return -1;
  }
  const char* p = static_cast<const char*>(image);
  for (size_t left = size; left;) {
    ssize_t n = ::write(fd, p, left);
    if (n <= 0) {
      *why = std::string("writing the image failed: ") + std::strerror(errno);
      ::close(fd);
      return -1;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return fd;
}

std::string check_kernels(const flagos_hal_sim_kernel_t* k) {
  for (size_t i = 0; i < kMaxKernels; ++i) {
    if (!k[i].name) return "";
    if (!k[i].fn) return std::string("kernel '") + k[i].name + "' has no function";
    if (k[i].num_args > kMaxArgs || (k[i].num_args > 0 && !k[i].arg_sizes)) {
      return std::string("kernel '") + k[i].name + "' declares its arguments wrongly";
    }
  }
  return "more than 4096 kernels, or the array is not ended by a NULL name";
}

}  // namespace

KernelLibrary::~KernelLibrary() {
  if (handle) dlclose(handle);
  if (fd >= 0) ::close(fd);
}

const char* Sim::kernel_formats() { return FLAGOS_SIM_KERNEL_FORMAT; }

Status Sim::kernel_target(int, flagos_kernel_target_t* target) {
  // No Triton backend compiles for the simulator: kernels for it are C (sim_runtime.h).
  std::snprintf(target->arch, sizeof target->arch, "%s", "host");
  target->warp_size = 1;
  target->max_threads_per_block = 1024;
  target->max_shared_memory = 256 * 1024;
  return FLAGOS_SUCCESS;
}

Status Sim::module_load(Module& m, const char*, const void* image, size_t size) {
  if (size < 4 || std::memcmp(image, "\x7f" "ELF", 4) != 0) {
    return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "module_load: not a %s image (not an ELF shared library)",
                     FLAGOS_SIM_KERNEL_FORMAT);
  }
  std::string why;
  int fd = image_file(image, size, &why);
  if (fd < 0) return kit::fail(FLAGOS_ERROR_UNKNOWN, "module_load: %s", why.c_str());
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  auto lib = std::make_shared<KernelLibrary>();
  lib->fd = fd;
  lib->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) {
    const char* err = dlerror();
    return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "module_load: the image cannot be loaded: %s", err ? err : "?");
  }
  lib->kernels = static_cast<const flagos_hal_sim_kernel_t*>(dlsym(lib->handle, FLAGOS_SIM_KERNELS_SYMBOL));
  if (!lib->kernels) {
    return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "module_load: the image does not export %s",
                     FLAGOS_SIM_KERNELS_SYMBOL);
  }
  std::string bad = check_kernels(lib->kernels);
  if (!bad.empty()) return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "module_load: %s", bad.c_str());
  m.lib = std::move(lib);
  return FLAGOS_SUCCESS;
}

Status Sim::module_get_function(Module& m, const char* name, Function& f) {
  for (const flagos_hal_sim_kernel_t* k = m.lib->kernels; k->name; ++k) {
    if (std::strcmp(k->name, name) != 0) continue;
    f.lib = m.lib;
    f.kernel = k;
    f.num_args = k->num_args;
    if (k->num_args > 0) f.arg_sizes.assign(k->arg_sizes, k->arg_sizes + k->num_args);
    return FLAGOS_SUCCESS;
  }
  return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "module_get_function: the module has no kernel '%s'", name);
}

Status Sim::function_set_shared_memory(Function&, size_t) { return FLAGOS_SUCCESS; }

Status Sim::launch_kernel(Function& f, const uint32_t grid[3], const uint32_t block[3], size_t shared_memory,
                          void* const* args, const size_t* arg_sizes, int num_args, Stream& stream) {
  // The argument values are copied now (the caller's may change once this returns), each
  // at a 16-byte aligned offset, as a device's parameter buffer would hold them.
  std::vector<size_t> offsets(num_args);
  size_t bytes = 0;
  for (int i = 0; i < num_args; ++i) {
    offsets[i] = bytes;
    bytes += (arg_sizes[i] + 15) / 16 * 16;
  }
  auto values = std::make_shared<std::vector<unsigned char>>(bytes ? bytes : 1);
  for (int i = 0; i < num_args; ++i) std::memcpy(values->data() + offsets[i], args[i], arg_sizes[i]);
  flagos_hal_sim_program_t program{};
  for (int d = 0; d < 3; ++d) {
    program.grid[d] = grid[d];
    program.block[d] = block[d];
  }
  program.shared_memory_size = shared_memory;
  stream.push([lib = f.lib, kernel = f.kernel, values, offsets = std::move(offsets), program]() mutable {
    std::vector<void*> params(offsets.size() ? offsets.size() : 1);
    for (size_t i = 0; i < offsets.size(); ++i) params[i] = values->data() + offsets[i];
    std::vector<unsigned char> shared(program.shared_memory_size);
    program.shared_memory = shared.empty() ? nullptr : shared.data();
    for (uint32_t z = 0; z < program.grid[2]; ++z) {
      for (uint32_t y = 0; y < program.grid[1]; ++y) {
        for (uint32_t x = 0; x < program.grid[0]; ++x) {
          program.program_id[0] = x;
          program.program_id[1] = y;
          program.program_id[2] = z;
          if (!shared.empty()) std::memset(shared.data(), 0, shared.size());
          kernel->fn(&program, params.data());
        }
      }
    }
  });
  return FLAGOS_SUCCESS;
}

Status Sim::module_unload(Module& m) {
  m.lib.reset();  // dlclose when the last queued launch has run
  return FLAGOS_SUCCESS;
}

// The info as it is: the kit checked it, the whole tensor inside one allocation of the
// device, so a sim kernel reads through the descriptor without further checks.
Status Sim::kernel_encode_tensor_descriptor(int device, const flagos_tensor_descriptor_info_t& info,
                                            void* out, size_t* size) {
  if (info.element_type != 0 || info.swizzle != 0) {
    return kit::fail(FLAGOS_ERROR_INVALID_VALUE,
                     "kernel_encode_tensor_descriptor: element type %d and swizzle %d: the simulated "
                     "device has no codes, both must be 0", info.element_type, info.swizzle);
  }
  if (*size < sizeof(flagos_hal_sim_tensor_descriptor_t)) {
    size_t need = sizeof(flagos_hal_sim_tensor_descriptor_t);
    *size = need;
    return kit::fail(FLAGOS_ERROR_INVALID_VALUE, "kernel_encode_tensor_descriptor: %zu bytes needed", need);
  }
  flagos_hal_sim_tensor_descriptor_t d;
  std::memset(&d, 0, sizeof d);
  d.base = info.base;
  d.ndim = info.ndim;
  d.element_size = info.element_size;
  for (int i = 0; i < info.ndim; ++i) {
    d.shape[i] = info.shape[i];
    d.strides[i] = info.strides[i];
    d.block_shape[i] = info.block_shape[i];
  }
  d.fill_nan = info.fill_nan ? 1 : 0;
  std::memcpy(out, &d, sizeof d);
  *size = sizeof d;
  (void)device;
  return FLAGOS_SUCCESS;
}

}  // namespace flagos_sim

// flagos HAL kit: the optional kernel extension (ABI 1.2, flagos_hal.h "kernel extension").
//
// A vendor whose chip runs kernels compiled for it (by its Triton backend, or shipped as
// binaries) adds to its class (after its Stream type) the two types and
// FLAGOS_HAL_KIT_KERNEL_CALLS(), which declares the calls below, and defines them:
//
//   struct Module : kit::ModuleBase { ... };        // your loaded image
//   struct Function : kit::FunctionBase { ... };    // your kernel handle
//   static const char* kernel_formats();            // "acme-elf" (comma-separated)
//   // `target` arrives zeroed with struct_size set to the whole struct: fill it.
//   static Status kernel_target(int device, flagos_kernel_target_t* target);
//   // Load `image` (format is one of kernel_formats) onto m.device, made current.
//   static Status module_load(Module& m, const char* format, const void* image, size_t size);
//   // Find kernel `name` in `m`; fill f.num_args and f.arg_sizes where the image says them
//   // (the kit then checks each launch against them).
//   static Status module_get_function(Module& m, const char* name, Function& f);
//   // Allow up to `bytes` of dynamic shared memory (the kit checked the device's maximum).
//   static Status function_set_shared_memory(Function& f, size_t bytes);
//   // Queue one launch on `stream` (of f.device); the kit checked the grid, the block, the
//   // shared memory, the argument count and sizes (where known) and the stream's device.
//   static Status launch_kernel(Function& f, const uint32_t grid[3], const uint32_t block[3],
//                               size_t shared_memory, void* const* args, const size_t* arg_sizes,
//                               int num_args, Stream& stream);
//   static Status module_unload(Module& m);         // after its queued launches finish
//
// and the kit fills the table's kernel entries. A vendor class without `Module` leaves them
// NULL: its table says (FLAGOS_HAL_HAS) that it has no kernel extension.
//
// The optional tensor descriptors (ABI 1.5): a vendor class with the kernel extension whose
// Triton backend lowers host tensor descriptors to a value of its own also defines
//
//   // Encode `info` (checked: dimensions, base, innermost stride, tile, element size) for
//   // a kernel on `device` into `out` (`*size` bytes of room): set *size to the bytes
//   // written, or to the bytes needed and fail with INVALID_VALUE when they do not fit.
//   static Status kernel_encode_tensor_descriptor(int device,
//                                                 const flagos_tensor_descriptor_info_t& info,
//                                                 void* out, size_t* size);
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "flagos_hal/flagos_hal.h"
#include "flagos_hal/kit/errors.hpp"
#include "flagos_hal/kit/faults.hpp"
#include "flagos_hal/kit/graph.hpp"
#include "flagos_hal/kit/registry.hpp"

// The kernel extension's calls, declared inside a vendor class (after its Stream, Module
// and Function types); see above for what each does.
#define FLAGOS_HAL_KIT_KERNEL_CALLS()                                                         \
  static const char* kernel_formats();                                                       \
  static ::flagos_hal::kit::Status kernel_target(int device, flagos_kernel_target_t* target); \
  static ::flagos_hal::kit::Status module_load(Module& m, const char* format, const void* image, \
                                               size_t size);                                 \
  static ::flagos_hal::kit::Status module_get_function(Module& m, const char* name, Function& f); \
  static ::flagos_hal::kit::Status function_set_shared_memory(Function& f, size_t bytes);   \
  static ::flagos_hal::kit::Status launch_kernel(Function& f, const uint32_t grid[3],       \
                                                 const uint32_t block[3], size_t shared_memory, \
                                                 void* const* args, const size_t* arg_sizes, \
                                                 int num_args, Stream& stream);             \
  static ::flagos_hal::kit::Status module_unload(Module& m);

namespace flagos_hal {
namespace kit {

// What the kit keeps for every module; a vendor's Module derives from it.
struct ModuleBase {
  int device = 0;
};

// What the kit keeps for every function; a vendor's Function derives from it.
struct FunctionBase {
  int device = 0;
  std::string name;
  int num_args = -1;              // -1: the image does not say (no argument checks)
  std::vector<size_t> arg_sizes;  // bytes of each argument, when num_args >= 0
  size_t shared_memory_allowed = 0;  // raised by function_set_shared_memory
};

namespace detail {
template <class V, class = void>
struct HasKernels : std::false_type {};
template <class V>
struct HasKernels<V, std::void_t<typename V::Module>> : std::true_type {};
template <class V, class = void>
struct HasTensorDescriptors : std::false_type {};
template <class V>
struct HasTensorDescriptors<V, std::void_t<decltype(V::kernel_encode_tensor_descriptor(
                                   0, std::declval<const flagos_tensor_descriptor_info_t&>(),
                                   static_cast<void*>(nullptr), static_cast<size_t*>(nullptr)))>>
    : std::true_type {};
}  // namespace detail

// The kernel entries of Hal<V> (kit.hpp), for a vendor class with a Module.
template <class V, class H>
struct KernelRuntime {
  using Module = typename V::Module;
  using Function = typename V::Function;
  using Stream = typename V::Stream;
  static_assert(std::is_base_of<ModuleBase, Module>::value, "V::Module must derive from kit::ModuleBase");
  static_assert(std::is_base_of<FunctionBase, Function>::value,
                "V::Function must derive from kit::FunctionBase");

  // A loaded module with the functions handed out of it, each once per name.
  struct Loaded {
    std::shared_ptr<Module> module;
    std::mutex mu;
    std::map<std::string, std::shared_ptr<Function>> functions;
  };
  struct State {
    HandleRegistry<Loaded> modules;
    HandleRegistry<Function> functions;
    std::mutex targets_mu;
    std::map<int, flagos_kernel_target_t> targets;  // per device, asked once
  };
  static State& state() {
    static auto* s = new State;  // never destroyed: calls may come during exit
    return *s;
  }

  static Status target_of(int device, flagos_kernel_target_t* out) {
    State& st = state();
    std::lock_guard<std::mutex> lock(st.targets_mu);
    auto it = st.targets.find(device);
    if (it == st.targets.end()) {
      flagos_kernel_target_t t;
      std::memset(&t, 0, sizeof t);
      t.struct_size = sizeof t;
      FLAGOS_KIT_TRY(V::kernel_target(device, &t));
      t.struct_size = sizeof t;
      it = st.targets.emplace(device, t).first;
    }
    *out = it->second;
    return FLAGOS_SUCCESS;
  }

  static Status get_formats(const char** formats) {
    if (!formats) return fail(FLAGOS_ERROR_INVALID_VALUE, "kernel_get_formats: formats is NULL");
    *formats = V::kernel_formats();
    return FLAGOS_SUCCESS;
  }
  static Status get_target(int device, flagos_kernel_target_t* target) {
    if (!target) return fail(FLAGOS_ERROR_INVALID_VALUE, "kernel_get_target: target is NULL");
    if (target->struct_size < sizeof(uint32_t)) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "kernel_get_target: target->struct_size (%u) is too small",
                  target->struct_size);
    }
    FLAGOS_KIT_TRY(H::require_device(device, "kernel_get_target"));
    flagos_kernel_target_t t;
    FLAGOS_KIT_TRY(target_of(device, &t));
    uint32_t size = target->struct_size < sizeof t ? target->struct_size : sizeof t;
    t.struct_size = target->struct_size;
    std::memcpy(target, &t, size);
    return FLAGOS_SUCCESS;
  }
  static Status load(int device, const char* format, const void* image, size_t size,
                     flagos_module_t* module) {
    if (!module) return fail(FLAGOS_ERROR_INVALID_VALUE, "module_load: module is NULL");
    if (!format) return fail(FLAGOS_ERROR_INVALID_VALUE, "module_load: format is NULL");
    if (!image || size == 0) return fail(FLAGOS_ERROR_INVALID_VALUE, "module_load: empty image");
    FLAGOS_KIT_TRY(H::require_device(device, "module_load"));
    if (!format_listed(V::kernel_formats(), format)) {
      return fail(FLAGOS_ERROR_NOT_SUPPORTED,
                  "module_load: format '%s' is not one this HAL loads (it loads: %s)", format,
                  V::kernel_formats());
    }
    FLAGOS_KIT_TRY(H::enter_call(Op::kModuleLoad));
    auto loaded = std::make_shared<Loaded>();
    loaded->module = std::make_shared<Module>();
    loaded->module->device = device;
    FLAGOS_KIT_TRY(H::enter_device(device));
    FLAGOS_KIT_TRY(V::module_load(*loaded->module, format, image, size));
    state().modules.add(loaded);
    *module = reinterpret_cast<flagos_module_t>(loaded.get());
    return FLAGOS_SUCCESS;
  }
  static Status get_function(flagos_module_t module, const char* name, flagos_function_t* function) {
    if (!function) return fail(FLAGOS_ERROR_INVALID_VALUE, "module_get_function: function is NULL");
    if (!name || !*name) return fail(FLAGOS_ERROR_INVALID_VALUE, "module_get_function: no name given");
    std::shared_ptr<Loaded> loaded = state().modules.find(module);
    if (!loaded) return fail(FLAGOS_ERROR_INVALID_HANDLE, "module_get_function: unknown or unloaded module");
    std::lock_guard<std::mutex> lock(loaded->mu);
    auto it = loaded->functions.find(name);
    if (it == loaded->functions.end()) {
      auto f = std::make_shared<Function>();
      f->device = loaded->module->device;
      f->name = name;
      FLAGOS_KIT_TRY(H::enter_device(f->device));
      FLAGOS_KIT_TRY(V::module_get_function(*loaded->module, name, *f));
      if (f->num_args >= 0 && f->arg_sizes.size() != static_cast<size_t>(f->num_args)) {
        return fail(FLAGOS_ERROR_UNKNOWN, "module_get_function: '%s' declares %d arguments but %zu sizes",
                    name, f->num_args, f->arg_sizes.size());
      }
      state().functions.add(f);
      it = loaded->functions.emplace(name, f).first;
    }
    *function = reinterpret_cast<flagos_function_t>(it->second.get());
    return FLAGOS_SUCCESS;
  }
  static Status set_shared_memory(flagos_function_t function, size_t bytes) {
    std::shared_ptr<Function> f = state().functions.find(function);
    if (!f) return fail(FLAGOS_ERROR_INVALID_HANDLE, "function_set_shared_memory: unknown function");
    flagos_kernel_target_t t;
    FLAGOS_KIT_TRY(target_of(f->device, &t));
    if (bytes > t.max_shared_memory) {
      return fail(FLAGOS_ERROR_INVALID_VALUE,
                  "function_set_shared_memory: %zu bytes for '%s', device %d allows at most %llu", bytes,
                  f->name.c_str(), f->device, static_cast<unsigned long long>(t.max_shared_memory));
    }
    FLAGOS_KIT_TRY(H::enter_device(f->device));
    FLAGOS_KIT_TRY(V::function_set_shared_memory(*f, bytes));
    f->shared_memory_allowed = bytes;
    return FLAGOS_SUCCESS;
  }
  // The launch's shape and arguments against the device's limits and the kernel's
  // declared arguments.
  static Status check_launch(const Function& f, const uint32_t grid[3], const uint32_t block[3],
                             size_t shared_memory, void* const* args, const size_t* arg_sizes,
                             int num_args) {
    if (!grid || !block) return fail(FLAGOS_ERROR_INVALID_VALUE, "launch_kernel: grid or block is NULL");
    for (int d = 0; d < 3; ++d) {
      if (grid[d] == 0 || block[d] == 0) {
        return fail(FLAGOS_ERROR_INVALID_VALUE,
                    "launch_kernel: '%s' with grid (%u, %u, %u) and block (%u, %u, %u): every "
                    "dimension must be at least 1", f.name.c_str(), grid[0], grid[1], grid[2],
                    block[0], block[1], block[2]);
      }
    }
    flagos_kernel_target_t t;
    FLAGOS_KIT_TRY(target_of(f.device, &t));
    unsigned long long threads = 1ull * block[0] * block[1] * block[2];
    if (threads > t.max_threads_per_block) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "launch_kernel: '%s': %llu threads per block, device %d allows %u",
                  f.name.c_str(), threads, f.device, t.max_threads_per_block);
    }
    size_t limit = f.shared_memory_allowed > kDefaultSharedMemory ? f.shared_memory_allowed
                   : kDefaultSharedMemory < t.max_shared_memory ? kDefaultSharedMemory
                                                                 : t.max_shared_memory;
    if (shared_memory > limit) {
      return fail(FLAGOS_ERROR_INVALID_VALUE,
                  "launch_kernel: '%s' asks for %zu bytes of dynamic shared memory, %zu allowed; "
                  "allow more first with function_set_shared_memory", f.name.c_str(), shared_memory,
                  limit);
    }
    if (num_args < 0 || (num_args > 0 && (!args || !arg_sizes))) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "launch_kernel: '%s': %d arguments but args or arg_sizes is NULL",
                  f.name.c_str(), num_args);
    }
    for (int i = 0; i < num_args; ++i) {
      if (!args[i]) return fail(FLAGOS_ERROR_INVALID_VALUE, "launch_kernel: '%s': args[%d] is NULL", f.name.c_str(), i);
    }
    if (f.num_args < 0) return FLAGOS_SUCCESS;
    if (num_args != f.num_args) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "launch_kernel: '%s' takes %d arguments, %d given",
                  f.name.c_str(), f.num_args, num_args);
    }
    for (int i = 0; i < num_args; ++i) {
      if (arg_sizes[i] != f.arg_sizes[i]) {
        return fail(FLAGOS_ERROR_INVALID_VALUE, "launch_kernel: '%s' argument %d is %zu bytes, %zu given",
                    f.name.c_str(), i, f.arg_sizes[i], arg_sizes[i]);
      }
    }
    return FLAGOS_SUCCESS;
  }
  static Status launch(flagos_function_t function, const uint32_t grid[3], const uint32_t block[3],
                       size_t shared_memory, void* const* args, const size_t* arg_sizes, int num_args,
                       flagos_stream_t stream) {
    Function* f = state().functions.find_cached(function);
    if (!f) return fail(FLAGOS_ERROR_INVALID_HANDLE, "launch_kernel: unknown function (or its module was unloaded)");
    Stream* s = H::stream(stream);
    if (!s) return fail(FLAGOS_ERROR_INVALID_HANDLE, "launch_kernel: unknown or destroyed stream");
    if (s->device != f->device) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "launch_kernel: '%s' is loaded on device %d, the stream is on %d",
                  f->name.c_str(), f->device, s->device);
    }
    FLAGOS_KIT_TRY(check_launch(*f, grid, block, shared_memory, args, arg_sizes, num_args));
    FLAGOS_KIT_TRY(H::enter_call(Op::kLaunchKernel));
    FLAGOS_KIT_TRY(H::enter_device(f->device));
    return V::launch_kernel(*f, grid, block, shared_memory, args, arg_sizes, num_args, *s);
  }
  static Status unload(flagos_module_t module) {
    bool found = false;
    std::shared_ptr<Loaded> loaded = state().modules.remove_if(module, [](const Loaded&) { return true; }, &found);
    if (!loaded) return fail(FLAGOS_ERROR_INVALID_HANDLE, "module_unload: unknown or already unloaded module");
    {
      std::lock_guard<std::mutex> lock(loaded->mu);
      for (auto& kv : loaded->functions) state().functions.remove_if(kv.second.get(), [](const Function&) { return true; }, &found);
    }
    FLAGOS_KIT_TRY(H::enter_device(loaded->module->device));
    return V::module_unload(*loaded->module);
  }

  // kernel_encode_tensor_descriptor: the description checked against the ABI's rules,
  // then the vendor's encoding.
  static Status encode_tensor_descriptor(int device, const flagos_tensor_descriptor_info_t* info,
                                         void* descriptor, size_t* size) {
    constexpr const char* fn = "kernel_encode_tensor_descriptor";
    if (!info || !size) return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: info or size is NULL", fn);
    if (info->struct_size < sizeof *info) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: info->struct_size is %u, want %zu", fn,
                  info->struct_size, sizeof *info);
    }
    FLAGOS_KIT_TRY(H::require_device(device, fn));
    int n = info->ndim;
    if (n < 1 || n > FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: %d dimensions, a descriptor has 1 to %d", fn, n,
                  FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS);
    }
    if (info->base == 0) return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: the base address is NULL", fn);
    uint32_t es = info->element_size;
    if (es != 1 && es != 2 && es != 4 && es != 8) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: element size %u, not 1, 2, 4 or 8 bytes", fn, es);
    }
    for (int d = 0; d < n; ++d) {
      if (info->shape[d] == 0 || info->block_shape[d] == 0 || info->strides[d] < 1) {
        return fail(FLAGOS_ERROR_INVALID_VALUE,
                    "%s: dimension %d has size %llu, tile %u and stride %lld; each must be at least 1",
                    fn, d, static_cast<unsigned long long>(info->shape[d]), info->block_shape[d],
                    static_cast<long long>(info->strides[d]));
      }
    }
    if (info->strides[n - 1] != 1) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: the innermost stride is %lld, a descriptor needs 1",
                  fn, static_cast<long long>(info->strides[n - 1]));
    }
    // The tensor's memory: all of it inside one allocation where the HAL checks ranges,
    // else at least its base on the device named where the HAL can tell.
    const void* base = reinterpret_cast<const void*>(static_cast<uintptr_t>(info->base));
    int owner = -1;
    if constexpr (V::kCheckRanges) {
      uint64_t last = 0;
      for (int d = 0; d < n; ++d) last += (info->shape[d] - 1) * static_cast<uint64_t>(info->strides[d]);
      size_t bytes = static_cast<size_t>((last + 1) * es);
      owner = H::device_of_range(base, bytes);
      if (owner < 0) {
        return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: the tensor at %p (%zu bytes) is not inside a live "
                    "device allocation", fn, base, bytes);
      }
    } else {
      owner = H::device_of_memory(base);
    }
    if (owner >= 0 && owner != device) {
      return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: the tensor is memory of device %d, not %d", fn, owner,
                  device);
    }
    if (*size && !descriptor) return fail(FLAGOS_ERROR_INVALID_VALUE, "%s: descriptor is NULL", fn);
    FLAGOS_KIT_TRY(H::enter_device(device));
    return V::kernel_encode_tensor_descriptor(device, *info, descriptor, size);
  }

  // Dynamic shared memory a launch may ask for without function_set_shared_memory (CUDA's
  // 48 KiB).
  static constexpr size_t kDefaultSharedMemory = 48 * 1024;
};

}  // namespace kit
}  // namespace flagos_hal

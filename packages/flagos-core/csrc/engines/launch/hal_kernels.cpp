// flagos._C's kernel calls: images loaded with the HAL's module_load, kernels launched with
// launch_kernel on the current flagos stream, so a launch is ordered with the ops before
// and after it on that stream as any op's work is.
#include "engines/launch/hal_kernels.h"

#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "engines/launch/launch_cache.h"
#include "runtime/hal.h"
#include "runtime/stream.h"

namespace py = pybind11;

namespace flagos {
namespace {

bool has_kernel_extension(const flagos_hal_table_t& t) {
  return FLAGOS_HAL_HAS(&t, kernel_get_formats) && FLAGOS_HAL_HAS(&t, kernel_get_target) &&
         FLAGOS_HAL_HAS(&t, module_load) && FLAGOS_HAL_HAS(&t, module_get_function) &&
         FLAGOS_HAL_HAS(&t, function_set_shared_memory) && FLAGOS_HAL_HAS(&t, launch_kernel) &&
         FLAGOS_HAL_HAS(&t, module_unload);
}

const flagos_hal_table_t& kernel_hal(c10::DeviceIndex device) {
  const flagos_hal_table_t& t = hal_of(device);
  if (!has_kernel_extension(t)) {
    const char* name = "?";
    t.get_name(&name);
    TORCH_CHECK_NOT_IMPLEMENTED(false, "flagos: the HAL '", name, "' of flagos:", int(device),
                                " has no kernel extension (ABI 1.2, optional): kernels cannot be "
                                "loaded or launched on it");
  }
  return t;
}

std::string last_error(const flagos_hal_table_t& t) {
  const char* text = "";
  t.get_last_error_message(&text);
  return text ? text : "";
}

// The comma-separated formats of flagos:device's HAL; "" without the extension.
std::string kernel_formats(int device) {
  const flagos_hal_table_t& t = hal_of(static_cast<c10::DeviceIndex>(device));
  if (!has_kernel_extension(t)) return "";
  const char* formats = "";
  FLAGOS_HAL_CHECK(t, t.kernel_get_formats(&formats));
  return formats ? formats : "";
}

py::dict kernel_target(int device) {
  auto index = static_cast<c10::DeviceIndex>(device);
  const flagos_hal_table_t& t = kernel_hal(index);
  flagos_kernel_target_t target{};
  target.struct_size = sizeof target;
  FLAGOS_HAL_CHECK(t, t.kernel_get_target(hal_device(index).local_index, &target));
  py::dict d;
  d["backend"] = std::string(target.backend, strnlen(target.backend, sizeof target.backend));
  d["arch"] = std::string(target.arch, strnlen(target.arch, sizeof target.arch));
  d["warp_size"] = target.warp_size;
  d["max_threads_per_block"] = target.max_threads_per_block;
  d["max_shared_memory"] = target.max_shared_memory;
  return d;
}

// A module loaded on one flagos device, unloaded when the last reference goes (the HAL
// lets its queued launches finish first).
class KernelModule {
 public:
  KernelModule(int device, const std::string& format, const py::bytes& image)
      : device_(static_cast<c10::DeviceIndex>(device)), table_(&kernel_hal(device_)) {
    std::string bytes = image;
    flagos_status_t st;
    {
      py::gil_scoped_release release;
      st = table_->module_load(hal_device(device_).local_index, format.c_str(), bytes.data(),
                               bytes.size(), &module_);
    }
    if (st == FLAGOS_ERROR_OUT_OF_MEMORY) {
      // Loading takes device memory (code, constants): an allocation failure like any other.
      std::string why = last_error(*table_);
      size_t free_bytes = 0, total_bytes = 0;
      table_->mem_get_info(hal_device(device_).local_index, &free_bytes, &total_bytes);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "flagos: out of memory on flagos:", int(device_),
                       " loading a ", format, " image of ", bytes.size(), " bytes (", free_bytes,
                       " of ", total_bytes, " bytes free): ", why);
    }
    if (st != FLAGOS_SUCCESS) {
      std::string why = last_error(*table_);
      TORCH_CHECK(false, "flagos: loading a ", format, " image of ", bytes.size(),
                  " bytes on flagos:", int(device_), " failed: ", why);
    }
  }
  ~KernelModule() {
    if (module_) table_->module_unload(module_);
  }
  KernelModule(const KernelModule&) = delete;
  KernelModule& operator=(const KernelModule&) = delete;

  // The kernel `name` as an integer handle, valid while this module lives.
  uintptr_t function(const std::string& name) {
    flagos_function_t f = nullptr;
    flagos_status_t st = table_->module_get_function(module_, name.c_str(), &f);
    TORCH_CHECK(st == FLAGOS_SUCCESS, "flagos: no kernel '", name, "' in the module on flagos:",
                int(device_), ": ", last_error(*table_));
    return reinterpret_cast<uintptr_t>(f);
  }
  void set_shared_memory(uintptr_t function, size_t bytes) {
    FLAGOS_HAL_CHECK(*table_, table_->function_set_shared_memory(
                                  reinterpret_cast<flagos_function_t>(function), bytes));
  }
  int device() const { return device_; }

 private:
  c10::DeviceIndex device_;
  const flagos_hal_table_t* table_;
  flagos_module_t module_ = nullptr;
};

// One launch from Python (flagos.kernels, flagos.triton_driver): on the flagos stream
// `stream_id` of the device (None: the current one), recorded for the launch cache when a
// launch-cached op's kernel is running. Each parameter is (is_pointer, bytes, bits), or
// bytes passed by value (a tensor descriptor): a launch with one of those is not kept, as
// its bytes embed addresses a relaunch cannot rewrite.
void launch_from_python(int device, uintptr_t function, const std::vector<uint32_t>& grid,
                        const std::vector<uint32_t>& block, uint32_t shared, const py::list& py_params,
                        std::optional<int64_t> stream_id, py::object keepalive) {
  TORCH_CHECK(grid.size() == 3 && block.size() == 3, "flagos: a launch takes a grid and a block "
              "of three dimensions each, got ", grid.size(), " and ", block.size());
  KernelLaunch l;
  l.device = static_cast<c10::DeviceIndex>(device);
  l.function = reinterpret_cast<flagos_function_t>(function);
  std::copy(grid.begin(), grid.end(), l.grid);
  std::copy(block.begin(), block.end(), l.block);
  l.shared_bytes = shared;
  std::vector<std::tuple<bool, int, uint64_t>> scalars;
  std::vector<std::pair<size_t, std::string>> by_value;  // (position, bytes)
  for (size_t i = 0; i < py_params.size(); ++i) {
    py::handle item = py_params[i];
    if (py::isinstance<py::bytes>(item)) {
      by_value.emplace_back(i, item.cast<std::string>());
      TORCH_CHECK(by_value.back().second.size() <= kMaxTensorDescriptorBytes, "flagos: a kernel "
                  "parameter passed by value takes at most ", kMaxTensorDescriptorBytes,
                  " bytes, got ", by_value.back().second.size());
    } else {
      scalars.push_back(item.cast<std::tuple<bool, int, uint64_t>>());
    }
  }
  std::vector<LaunchParam> params = launch_params(scalars);
  c10::Stream current = current_stream(l.device);
  c10::Stream stream = stream_id ? make_stream(l.device, *stream_id) : current;
  size_t n = py_params.size();
  std::vector<uint64_t> values(params.size());
  // by-value parameters (tensor descriptors) in aligned storage; reserved: never moved
  std::vector<TensorDescriptorBytes> blobs;
  blobs.reserve(by_value.size());
  std::vector<void*> ptrs(n);
  std::vector<size_t> sizes(n);
  for (size_t i = 0, s = 0, b = 0; i < n; ++i) {
    if (b < by_value.size() && by_value[b].first == i) {
      const std::string& bytes = by_value[b++].second;
      std::memcpy(blobs.emplace_back().bytes, bytes.data(), bytes.size());
      ptrs[i] = blobs.back().bytes;
      sizes[i] = bytes.size();
      continue;
    }
    values[s] = params[s].bits;
    ptrs[i] = &values[s];  // little-endian: the low bytes of the slot are the value
    sizes[i] = params[s].pointer ? sizeof(void*) : params[s].bytes;
    ++s;
  }
  if (launch_recording()) {
    if (by_value.empty()) {
      record_hal_launch(l, std::move(params), PyObjectRef(keepalive.ptr()), stream == current);
    } else {
      spoil_launch_recording("a launch with a parameter passed by value (a tensor descriptor)");
    }
  }
  launch_kernel_from_python(l, stream, ptrs.data(), sizes.data(), static_cast<int>(n));
}

// kernel_encode_tensor_descriptor (ABI 1.5) of flagos:device: the descriptor's bytes, for a
// launch parameter passed by value.
py::bytes encode_tensor_descriptor_py(int device, uint64_t base, const std::vector<uint64_t>& shape,
                                      const std::vector<int64_t>& strides, const std::vector<uint32_t>& block,
                                      uint32_t element_size, int32_t element_type, int32_t swizzle,
                                      bool fill_nan) {
  auto index = static_cast<c10::DeviceIndex>(device);
  const flagos_hal_table_t& t = kernel_hal(index);
  const char* name = "?";
  t.get_name(&name);
  TORCH_CHECK_NOT_IMPLEMENTED(FLAGOS_HAL_HAS(&t, kernel_encode_tensor_descriptor), "flagos: the HAL '",
                              name, "' of flagos:", device, " encodes no tensor descriptors (ABI 1.5, "
                              "optional): kernels taking host tensor descriptors cannot run on it");
  size_t n = shape.size();
  TORCH_CHECK(n >= 1 && n <= FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS && strides.size() == n && block.size() == n,
              "flagos: a tensor descriptor has 1 to ", FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS,
              " dimensions, each with a size, a stride and a tile size; got ", shape.size(), ", ",
              strides.size(), " and ", block.size());
  flagos_tensor_descriptor_info_t info{};
  info.struct_size = sizeof info;
  info.ndim = static_cast<int32_t>(n);
  info.base = base;
  for (size_t i = 0; i < n; ++i) {
    info.shape[i] = shape[i];
    info.strides[i] = strides[i];
    info.block_shape[i] = block[i];
  }
  info.element_size = element_size;
  info.element_type = element_type;
  info.swizzle = swizzle;
  info.fill_nan = fill_nan ? 1 : 0;
  TensorDescriptorBytes out;
  size_t size = 0;
  std::string error;
  TORCH_CHECK(encode_tensor_descriptor(index, info, out, &size, &error) == FLAGOS_SUCCESS,
              "flagos: encoding a tensor descriptor of ", n, " dimensions on flagos:", device,
              " failed: ", error);
  return py::bytes(reinterpret_cast<const char*>(out.bytes), size);
}

}  // namespace

flagos_status_t encode_tensor_descriptor(c10::DeviceIndex device, const flagos_tensor_descriptor_info_t& info,
                                         TensorDescriptorBytes& out, size_t* size, std::string* error) {
  const flagos_hal_table_t& t = hal_of(device);
  if (!FLAGOS_HAL_HAS(&t, kernel_encode_tensor_descriptor)) {
    if (error) *error = "the HAL encodes no tensor descriptors (ABI 1.5)";
    return FLAGOS_ERROR_NOT_SUPPORTED;
  }
  *size = sizeof out.bytes;
  flagos_status_t st = t.kernel_encode_tensor_descriptor(hal_device(device).local_index, &info, out.bytes, size);
  if (st != FLAGOS_SUCCESS && error) *error = last_error(t);
  return st;
}

flagos_status_t launch_kernel(const KernelLaunch& l, const c10::Stream& stream, void* const* params,
                              const size_t* sizes, int n, std::string* error) {
  if (l.grid[0] == 0 || l.grid[1] == 0 || l.grid[2] == 0) return FLAGOS_SUCCESS;
  const flagos_hal_table_t& t = hal_of(l.device);
  if (!FLAGOS_HAL_HAS(&t, launch_kernel)) {
    if (error) *error = "the HAL has no kernel extension";
    return FLAGOS_ERROR_NOT_SUPPORTED;
  }
  flagos_status_t st = t.launch_kernel(l.function, l.grid, l.block, l.shared_bytes, params, sizes, n,
                                       hal_stream(stream));
  if (st != FLAGOS_SUCCESS && error) *error = last_error(t);
  return st;
}

void launch_kernel_from_python(const KernelLaunch& l, const c10::Stream& stream,
                               void* const* params, const size_t* sizes, int n) {
  std::string error;
  flagos_status_t st;
  {
    py::gil_scoped_release release;
    st = launch_kernel(l, stream, params, sizes, n, &error);
  }
  TORCH_CHECK(st == FLAGOS_SUCCESS, "flagos: launching a kernel on flagos:", int(l.device),
              " failed: ", error);
}

void bind_hal_kernels(py::module& m) {
  m.def("_kernel_formats", &kernel_formats);
  m.def("_kernel_target", &kernel_target);
  py::class_<KernelModule, std::shared_ptr<KernelModule>>(m, "_KernelModule")
      .def(py::init<int, const std::string&, const py::bytes&>())
      .def("function", &KernelModule::function)
      .def("set_shared_memory", &KernelModule::set_shared_memory)
      .def_property_readonly("device", &KernelModule::device);
  m.def("_kernel_encode_tensor_descriptor", &encode_tensor_descriptor_py, py::arg("device"), py::arg("base"),
        py::arg("shape"), py::arg("strides"), py::arg("block"), py::arg("element_size"),
        py::arg("element_type"), py::arg("swizzle"), py::arg("fill_nan"));
  m.def("_kernel_launch", &launch_from_python, py::arg("device"), py::arg("function"),
        py::arg("grid"), py::arg("block"), py::arg("shared"), py::arg("params"),
        py::arg("stream_id") = py::none(), py::arg("keepalive") = py::none());
}

}  // namespace flagos

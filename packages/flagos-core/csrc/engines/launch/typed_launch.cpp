// flagos._C._TypedLauncher (declared in hal_kernels.h).
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "engines/launch/hal_kernels.h"
#include "engines/launch/launch_cache.h"
#include "engines/python/python_engine.h"
#include "runtime/stream.h"

namespace py = pybind11;

namespace flagos {
namespace {

// The kind of each parameter, one character per argument of the kernel's signature in its
// order, then the parameters that follow the arguments:
//   'p'  a pointer: a tensor (its data pointer), an address, None (null), or an object with
//        data_ptr() (Triton's TensorWrapper)
//   '1' '2' '4' '8'  an integer of that many bytes (two's complement, truncated as C does)
//   'h' fp16, 'b' bf16, 'f' fp32, 'd' fp64  (rounded to nearest even)
//   'c'  a constexpr: an argument that is not passed
//   'z'  a null pointer that is no argument (Triton's scratch pointers, after the arguments)
bool valid_kind(char k) { return std::strchr("p1248hbfdcz", k) != nullptr; }

uint64_t pointer_bits(PyObject* v) {
  if (v == Py_None) return 0;
  if (THPVariable_Check(v)) return reinterpret_cast<uintptr_t>(THPVariable_Unpack(v).data_ptr());
  if (PyLong_Check(v)) {
    uint64_t bits = PyLong_AsUnsignedLongLongMask(v);
    if (bits == static_cast<uint64_t>(-1) && PyErr_Occurred()) throw py::error_already_set();
    return bits;
  }
  return py::reinterpret_borrow<py::object>(v).attr("data_ptr")().cast<uint64_t>();
}

uint64_t integer_bits(PyObject* v, int bytes) {
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(v));
  if (!index) throw py::error_already_set();
  uint64_t bits = PyLong_AsUnsignedLongLongMask(index.ptr());
  if (bits == static_cast<uint64_t>(-1) && PyErr_Occurred()) throw py::error_already_set();
  return bytes == 8 ? bits : bits & ((uint64_t{1} << (8 * bytes)) - 1);
}

uint64_t float_bits(PyObject* v, char kind) {
  double d = PyFloat_AsDouble(v);
  if (d == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  switch (kind) {
    case 'd': {
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      return bits;
    }
    case 'f': {
      float f = static_cast<float>(d);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      return bits;
    }
    case 'h':
      return c10::Half(static_cast<float>(d)).x;
    default:  // 'b'
      return c10::BFloat16(static_cast<float>(d)).x;
  }
}

uint8_t kind_bytes(char kind) {
  switch (kind) {
    case '1': return 1;
    case '2': case 'h': case 'b': return 2;
    case '4': case 'f': return 4;
    default: return 8;  // 'p', 'z', '8', 'd'
  }
}

class TypedLauncher {
 public:
  TypedLauncher(std::string kinds, uint32_t block_x, uint32_t shared)
      : kinds_(std::move(kinds)), block_x_(block_x), shared_(shared) {
    for (char k : kinds_) {
      TORCH_CHECK(valid_kind(k), "flagos: parameter kind '", k, "' is not one of p1248hbfdcz");
      if (k != 'c') ++n_params_;
      if (k != 'z') ++n_args_;
    }
  }

  // Launches `function` (a kernel of a module loaded on flagos:device) with `args`, the
  // kernel's arguments in its signature's order, on the flagos stream `stream_id` (None:
  // the current one); recorded for the launch cache as _kernel_launch's launches are.
  void launch(int device, uintptr_t function, uint32_t gx, uint32_t gy, uint32_t gz,
              std::optional<int64_t> stream_id, const py::object& keepalive, const py::tuple& args) {
    TORCH_CHECK(args.size() == n_args_, "flagos: a kernel of ", n_args_, " arguments was given ",
                args.size());
    KernelLaunch l;
    l.device = static_cast<c10::DeviceIndex>(device);
    l.function = reinterpret_cast<flagos_function_t>(function);
    l.grid[0] = gx;
    l.grid[1] = gy;
    l.grid[2] = gz;
    l.block[0] = block_x_;
    l.shared_bytes = shared_;
    c10::SmallVector<uint64_t, 32> values(n_params_);
    c10::SmallVector<void*, 32> ptrs(n_params_);
    c10::SmallVector<size_t, 32> sizes(n_params_);
    size_t a = 0, p = 0;
    for (char k : kinds_) {
      if (k == 'c') {
        ++a;
        continue;
      }
      uint64_t bits = 0;
      if (k != 'z') {
        PyObject* v = args[a++].ptr();
        bits = k == 'p' ? pointer_bits(v)
               : (k >= '1' && k <= '8') ? integer_bits(v, k - '0')
                                        : float_bits(v, k);
      }
      values[p] = bits;
      ptrs[p] = &values[p];  // little-endian: the low bytes of the slot are the value
      sizes[p] = kind_bytes(k);
      ++p;
    }
    c10::Stream current = current_stream(l.device);
    c10::Stream stream = stream_id ? make_stream(l.device, *stream_id) : current;
    if (launch_recording()) {
      std::vector<LaunchParam> params;
      params.reserve(n_params_);
      for (size_t i = 0, j = 0; i < kinds_.size(); ++i) {
        char k = kinds_[i];
        if (k == 'c') continue;
        params.push_back({k == 'p' || k == 'z', kind_bytes(k), values[j++]});
      }
      record_hal_launch(l, std::move(params), PyObjectRef(keepalive.ptr()), stream == current);
    }
    launch_kernel_from_python(l, stream, ptrs.data(), sizes.data(), static_cast<int>(n_params_));
  }

  const std::string& kinds() const { return kinds_; }

 private:
  std::string kinds_;
  uint32_t block_x_;
  uint32_t shared_;
  size_t n_params_ = 0;
  size_t n_args_ = 0;
};

}  // namespace

void bind_typed_launch(py::module& m) {
  py::class_<TypedLauncher>(m, "_TypedLauncher")
      .def(py::init<std::string, uint32_t, uint32_t>(), py::arg("kinds"), py::arg("block_x"),
           py::arg("shared"))
      .def("launch", &TypedLauncher::launch)
      .def_property_readonly("kinds", &TypedLauncher::kinds);
  // The current stream of flagos:device as its id (torch.flagos.current_stream without
  // building a Stream object: Triton asks for it at every launch).
  m.def("_current_stream_id", [](int device) {
    return current_stream(static_cast<c10::DeviceIndex>(device)).id();
  });
}

}  // namespace flagos

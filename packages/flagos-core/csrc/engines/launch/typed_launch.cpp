// flagos._C._TypedLauncher (declared in hal_kernels.h).
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/SmallVector.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <optional>
#include <string>
#include <tuple>
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
//   'T'  a host tensor descriptor (Triton's TensorDescriptor: base, shape, strides,
//        padding) lowered to the chip's tile copies: the descriptor the HAL encodes, by
//        value, then the shape as 32-bit and the strides as 64-bit integers
//   'D'  a host tensor descriptor lowered to plain loads: the base pointer, the shape and
//        strides as 64-bit integers, the padding flag (1 byte), then the shape as 32-bit
//        and the strides as 64-bit integers
// (the layouts of Triton 3.6's CUDA launcher; flagos/triton_tensor_descriptors.py).
bool valid_kind(char k) { return std::strchr("p1248hbfdczTD", k) != nullptr; }

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

// What a descriptor parameter's kernel was compiled for: its dimensions and, for 'T', what
// the HAL encodes besides the tensor (tile, element size and type, swizzle) and whether the
// innermost size counts packed fp4 pairs (doubled, as Triton's launcher doubles it).
using DescriptorSpec = std::tuple<int, std::vector<uint32_t>, uint32_t, int32_t, int32_t, bool>;

struct Descriptor {
  char kind;  // 'T' or 'D'
  flagos_tensor_descriptor_info_t info{};  // 'T': all but the base, shape and strides
  bool fp4_padded = false;
};

// A Python sequence of `n` integers (a descriptor's shape or strides) into `out`.
template <typename T>
void read_ints(PyObject* seq, int n, T* out, const char* what) {
  py::sequence s = py::reinterpret_borrow<py::sequence>(seq);
  TORCH_CHECK_VALUE(static_cast<int>(s.size()) == n, "flagos: a tensor descriptor's ", what, " has ",
                    s.size(), " entries for a ", n, "-d parameter");
  for (int i = 0; i < n; ++i) out[i] = static_cast<T>(integer_bits(s[i].ptr(), 8));
}

class TypedLauncher {
 public:
  TypedLauncher(std::string kinds, uint32_t block_x, uint32_t shared,
                const std::vector<DescriptorSpec>& descriptors)
      : kinds_(std::move(kinds)), block_x_(block_x), shared_(shared) {
    size_t d = 0;
    for (char k : kinds_) {
      TORCH_CHECK(valid_kind(k), "flagos: parameter kind '", k, "' is not one of p1248hbfdczTD");
      if (k == 'T' || k == 'D') {
        TORCH_CHECK(d < descriptors.size(), "flagos: ", descriptors.size(),
                    " descriptor specs for more descriptor parameters");
        const auto& [ndim, block, element_size, element_type, swizzle, fp4_padded] = descriptors[d++];
        TORCH_CHECK(ndim >= 1 && ndim <= FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS,
                    "flagos: a tensor descriptor of ", ndim, " dimensions (1 to ",
                    FLAGOS_TENSOR_DESCRIPTOR_MAX_DIMS, ")");
        Descriptor desc{k};
        desc.info.struct_size = sizeof desc.info;
        desc.info.ndim = ndim;
        if (k == 'T') {
          TORCH_CHECK(static_cast<int>(block.size()) == ndim, "flagos: a ", ndim,
                      "-d tensor descriptor with a tile of ", block.size(), " dimensions");
          std::copy(block.begin(), block.end(), desc.info.block_shape);
          desc.info.element_size = element_size;
          desc.info.element_type = element_type;
          desc.info.swizzle = swizzle;
          desc.fp4_padded = fp4_padded;
        }
        descriptors_.push_back(desc);
        n_params_ += k == 'T' ? 1 + 2 * ndim : 2 + 4 * ndim;
        ++n_args_;
        continue;
      }
      if (k != 'c') ++n_params_;
      if (k != 'z') ++n_args_;
    }
    TORCH_CHECK(d == descriptors.size(), "flagos: ", descriptors.size(), " descriptor specs for ", d,
                " descriptor parameters");
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
    c10::SmallVector<bool, 32> pointer(n_params_, false);
    // 'T' parameters: the encoded bytes, and what they were encoded from (for the cache)
    std::vector<TensorDescriptorBytes> encoded;  // aligned new: a SmallVector grows with malloc
    c10::SmallVector<std::pair<size_t, flagos_tensor_descriptor_info_t>, 3> encoded_from;
    encoded.reserve(descriptors_.size());  // not moved while ptrs point into it
    size_t a = 0, p = 0, d = 0;
    auto put = [&](uint64_t bits, size_t bytes, bool is_pointer) {
      values[p] = bits;
      ptrs[p] = &values[p];  // little-endian: the low bytes of the slot are the value
      sizes[p] = bytes;
      pointer[p] = is_pointer;
      ++p;
    };
    for (char k : kinds_) {
      if (k == 'c') {
        ++a;
        continue;
      }
      if (k == 'z') {
        put(0, 8, true);
        continue;
      }
      PyObject* v = args[a++].ptr();
      if (k == 'T' || k == 'D') {
        const Descriptor& desc = descriptors_[d++];
        flagos_tensor_descriptor_info_t info = desc.info;
        py::handle h(v);
        info.base = pointer_bits(h.attr("base").ptr());
        read_ints(h.attr("shape").ptr(), info.ndim, info.shape, "shape");
        read_ints(h.attr("strides").ptr(), info.ndim, info.strides, "strides");
        info.fill_nan = py::str(h.attr("padding")).cast<std::string>() == "nan";
        int n = info.ndim;
        if (k == 'T') {
          if (desc.fp4_padded) info.shape[n - 1] *= 2;
          std::string error;
          size_t size = 0;
          TensorDescriptorBytes& bytes = encoded.emplace_back();
          TORCH_CHECK(encode_tensor_descriptor(l.device, info, bytes, &size, &error) == FLAGOS_SUCCESS,
                      "flagos: encoding a tensor descriptor of ", n, " dimensions on flagos:", device,
                      " failed: ", error);
          encoded_from.emplace_back(p, info);
          put(info.base, 8, true);
          ptrs[p - 1] = bytes.bytes;
          sizes[p - 1] = size;
        } else {
          put(info.base, 8, true);
          for (int i = 0; i < n; ++i) put(info.shape[i], 8, false);
          for (int i = 0; i < n; ++i) put(static_cast<uint64_t>(info.strides[i]), 8, false);
          put(info.fill_nan, 1, false);
        }
        for (int i = 0; i < n; ++i) put(static_cast<uint32_t>(info.shape[i]), 4, false);
        for (int i = 0; i < n; ++i) put(static_cast<uint64_t>(info.strides[i]), 8, false);
        continue;
      }
      bits_of(k, v, put);
    }
    c10::Stream current = current_stream(l.device);
    c10::Stream stream = stream_id ? make_stream(l.device, *stream_id) : current;
    if (launch_recording()) {
      std::vector<LaunchParam> params;
      params.reserve(n_params_);
      for (size_t i = 0; i < n_params_; ++i)
        params.push_back({pointer[i], static_cast<uint8_t>(pointer[i] ? 8 : sizes[i]), values[i]});
      for (const auto& [at, info] : encoded_from)
        params[at].descriptor = std::make_shared<const flagos_tensor_descriptor_info_t>(info);
      record_hal_launch(l, std::move(params), PyObjectRef(keepalive.ptr()), stream == current);
    }
    launch_kernel_from_python(l, stream, ptrs.data(), sizes.data(), static_cast<int>(n_params_));
  }

  const std::string& kinds() const { return kinds_; }

 private:
  template <typename Put>
  static void bits_of(char k, PyObject* v, Put& put) {
    uint64_t bits = k == 'p' ? pointer_bits(v)
                    : (k >= '1' && k <= '8') ? integer_bits(v, k - '0')
                                             : float_bits(v, k);
    put(bits, kind_bytes(k), k == 'p');
  }

  std::string kinds_;
  uint32_t block_x_;
  uint32_t shared_;
  std::vector<Descriptor> descriptors_;
  size_t n_params_ = 0;
  size_t n_args_ = 0;
};

}  // namespace

void bind_typed_launch(py::module& m) {
  py::class_<TypedLauncher>(m, "_TypedLauncher")
      .def(py::init<std::string, uint32_t, uint32_t, const std::vector<DescriptorSpec>&>(),
           py::arg("kinds"), py::arg("block_x"), py::arg("shared"),
           py::arg("descriptors") = std::vector<DescriptorSpec>())
      .def("launch", &TypedLauncher::launch)
      .def_property_readonly("kinds", &TypedLauncher::kinds);
  // The current stream of flagos:device as its id (torch.flagos.current_stream without
  // building a Stream object: Triton asks for it at every launch).
  m.def("_current_stream_id", [](int device) {
    return current_stream(static_cast<c10::DeviceIndex>(device)).id();
  });
}

}  // namespace flagos

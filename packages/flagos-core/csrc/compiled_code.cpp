// What the Python wrapper of torch.compile'd code calls on flagos, per buffer and kernel:
// each is a single C++ call, as torch._C._dynamo.guards._empty_strided_cuda and
// torch._C._cuda_getCurrentRawStream are for CUDA (a Python-level torch.empty_strided
// with a device string, or a torch.flagos.Stream object per kernel launch, cost a few
// microseconds each, which a small compiled graph pays on every call).
#include "compiled_code.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>

#include "aten/alias.h"
#include "aten/runtime_ops.h"
#include "runtime/hal.h"
#include "runtime/stream.h"

namespace flagos {
namespace {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

// `with flagos_device_guard(i):`: flagos:i current, and for a device with a device twin
// the twin device too (Triton kernels are loaded onto and launched on the current CUDA
// device); both restored on exit.
class CompiledDeviceGuard {
 public:
  explicit CompiledDeviceGuard(int device) : device_(static_cast<c10::DeviceIndex>(device)) {}

  void enter() {
    TORCH_CHECK(!flagos_, "flagos: a compiled-code device guard cannot be entered twice");
    flagos_.emplace(device_);
    try {
      if (auto twin = device_twin(device_)) twin_.emplace(*twin);
    } catch (...) {
      flagos_.reset();  // `with` does not call __exit__ when __enter__ raises
      throw;
    }
  }

  void exit() {
    twin_.reset();
    flagos_.reset();
  }

 private:
  c10::DeviceIndex device_;
  std::optional<CurrentDeviceScope> flagos_;
  std::optional<c10::DeviceGuard> twin_;
};

}  // namespace

void bind_compiled_code_helpers(pybind11::module& m) {
  namespace py = pybind11;
  m.def("_current_raw_stream", [](int d) {
    auto stream = current_stream(static_cast<c10::DeviceIndex>(d));
    return reinterpret_cast<intptr_t>(
        c10::impl::getDeviceGuardImpl(kFlagos)->getStreamNativeHandle(stream));
  }, "The native handle of the current stream of flagos:d (a cudaStream_t on a CUDA HAL).");
  m.def("_empty_strided", [](std::vector<int64_t> size, std::vector<int64_t> stride,
                             at::ScalarType dtype, int d) {
    return empty_strided_on(size, stride, dtype, static_cast<c10::DeviceIndex>(d));
  }, "A flagos:d tensor of these sizes, strides and dtype (not through the dispatcher).");
  py::class_<CompiledDeviceGuard>(m, "_CompiledDeviceGuard")
      .def(py::init<int>())
      .def("__enter__", &CompiledDeviceGuard::enter)
      .def("__exit__", [](CompiledDeviceGuard& g, py::args) { g.exit(); });
}

}  // namespace flagos

// What the Python wrapper of torch.compile'd code calls on flagos, per buffer and kernel:
// each is a single C++ call, as torch._C._dynamo.guards._empty_strided_cuda and
// torch._C._cuda_getCurrentRawStream are for CUDA (a Python-level torch.empty_strided
// with a device string, or a torch.flagos.Stream object per kernel launch, cost a few
// microseconds each, which a small compiled graph pays on every call).
#include "compiled_code.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>

#include "aten/alias.h"
#include "runtime/allocator.h"
#include "runtime/hal.h"
#include "runtime/stream.h"

namespace flagos {
namespace {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

// `with flagos_device_guard(i):`: flagos:i current, and for a device with a CUDA twin
// the twin device too (Triton kernels are loaded onto and launched on the current CUDA
// device); both restored on exit.
class CompiledDeviceGuard {
 public:
  explicit CompiledDeviceGuard(int device) : device_(static_cast<c10::DeviceIndex>(device)) {}

  void enter() {
    TORCH_CHECK(!entered_, "flagos: a compiled-code device guard cannot be entered twice");
    prev_ = current_device();
    if (prev_ != device_) set_current_device(device_);
    if (auto twin = device_twin(device_)) {
      try {
        twin_impl_ = c10::impl::getDeviceGuardImpl(twin->type());
        prev_twin_ = twin_impl_->exchangeDevice(*twin);
      } catch (...) {
        twin_impl_ = nullptr;  // `with` does not call __exit__ when __enter__ raises
        if (current_device() != prev_) set_current_device(prev_);
        throw;
      }
    }
    entered_ = true;
  }

  void exit() {
    entered_ = false;
    if (twin_impl_) twin_impl_->exchangeDevice(*prev_twin_);
    twin_impl_ = nullptr;
    if (current_device() != prev_) set_current_device(prev_);
  }

 private:
  c10::DeviceIndex device_;
  c10::DeviceIndex prev_ = -1;
  const c10::impl::DeviceGuardImplInterface* twin_impl_ = nullptr;
  std::optional<c10::Device> prev_twin_;
  bool entered_ = false;
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
                             at::ScalarType dtype, int d) -> at::Tensor {
    CurrentDeviceScope on(static_cast<c10::DeviceIndex>(d));  // the allocator's device
    return at::detail::empty_strided_generic(
        size, stride, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
  }, "A flagos:d tensor of these sizes, strides and dtype (not through the dispatcher).");
  py::class_<CompiledDeviceGuard>(m, "_CompiledDeviceGuard")
      .def(py::init<int>())
      .def("__enter__", &CompiledDeviceGuard::enter)
      .def("__exit__", [](CompiledDeviceGuard& g, py::args) { g.exit(); });
}

}  // namespace flagos

#include "dispatch/provider_call.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include "dispatch/dispatcher.h"

namespace py = pybind11;

namespace flagos {

py::object run_provider_from_python(const std::string& provider, const std::string& op_name,
                                    const py::tuple& args, const py::dict& kwargs, int device) {
  auto sep = op_name.find('.', op_name.find("::") == std::string::npos ? 0 : op_name.find("::"));
  std::string name = sep == std::string::npos ? op_name : op_name.substr(0, sep);
  std::string overload = sep == std::string::npos ? "" : op_name.substr(sep + 1);
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(handle, "flagos: no op named '", op_name, "'");
  torch::jit::Stack stack = torch::jit::createStackForSchema(
      handle->schema(), torch::jit::tuple_slice(args), py::reinterpret_borrow<py::kwargs>(kwargs),
      std::nullopt);
  bool ran;
  {
    py::gil_scoped_release no_gil;
    ran = run_with_provider(provider, *handle, &stack, static_cast<c10::DeviceIndex>(device));
  }
  if (!ran) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  return torch::jit::createPyObjectForStack(std::move(stack));
}

}  // namespace flagos

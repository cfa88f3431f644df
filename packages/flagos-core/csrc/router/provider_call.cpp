#include "router/provider_call.h"

#include <ATen/ScalarOps.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include "router/dispatcher.h"

namespace py = pybind11;

namespace flagos {
namespace {

bool is_tensor_type(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::TensorType) return true;
  auto opt = t->cast<c10::OptionalType>();
  return opt && opt->getElementType()->kind() == c10::TypeKind::TensorType;
}

// One argument from Python. A Python number in a Tensor position is what a provider
// receives for a wrapped number (a scalar operand: `x.add(1e-5)` reaches add.out with a
// 0-dim "wrapped number" tensor, which Python sees as a float): it becomes one again, so
// type promotion is the op's own.
c10::IValue to_argument(const c10::Argument& arg, py::handle obj) {
  const auto& type = arg.real_type();
  if (is_tensor_type(type) && (PyFloat_Check(obj.ptr()) || PyLong_Check(obj.ptr()) ||
                               PyBool_Check(obj.ptr()) || PyComplex_Check(obj.ptr()))) {
    at::Tensor t = at::scalar_to_tensor(torch::jit::toIValue(obj, c10::NumberType::get()).toScalar());
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
    return t;
  }
  return torch::jit::toIValue(obj, type);
}

}  // namespace

py::object run_provider_from_python(const std::string& provider, const std::string& op_name,
                                    const py::tuple& args, const py::dict& kwargs, int device) {
  auto sep = op_name.find('.', op_name.find("::") == std::string::npos ? 0 : op_name.find("::"));
  std::string name = sep == std::string::npos ? op_name : op_name.substr(0, sep);
  std::string overload = sep == std::string::npos ? "" : op_name.substr(sep + 1);
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(handle, "flagos: no op named '", op_name, "'");
  const auto& schema = handle->schema();
  TORCH_CHECK(args.size() <= schema.arguments().size(), "flagos: ", op_name, " takes ",
              schema.arguments().size(), " arguments, got ", args.size());
  torch::jit::Stack stack;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto& arg = schema.arguments()[i];
    if (i < args.size()) {
      stack.push_back(to_argument(arg, args[i]));
    } else if (kwargs.contains(arg.name())) {
      stack.push_back(to_argument(arg, kwargs[py::str(arg.name())]));
    } else {
      TORCH_CHECK(arg.default_value().has_value(), "flagos: ", op_name, ": argument '",
                  arg.name(), "' is missing");
      stack.push_back(*arg.default_value());
    }
  }
  bool ran;
  {
    py::gil_scoped_release no_gil;
    ran = run_with_provider(provider, *handle, &stack, static_cast<c10::DeviceIndex>(device));
  }
  if (!ran) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  return torch::jit::createPyObjectForStack(std::move(stack));
}

}  // namespace flagos

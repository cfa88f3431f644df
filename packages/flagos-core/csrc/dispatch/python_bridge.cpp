#include "dispatch/python_bridge.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include "dispatch/dispatcher.h"

namespace py = pybind11;

namespace flagos {

PyObjectRef::PyObjectRef(void* obj) : obj_(obj) {
  if (obj_) {
    py::gil_scoped_acquire gil;
    Py_INCREF(static_cast<PyObject*>(obj_));
  }
}
PyObjectRef::PyObjectRef(const PyObjectRef& other) : PyObjectRef(other.obj_) {}
PyObjectRef& PyObjectRef::operator=(const PyObjectRef& other) {
  if (this != &other) {
    PyObjectRef tmp(other);
    std::swap(obj_, tmp.obj_);
  }
  return *this;
}
PyObjectRef::~PyObjectRef() {
  if (obj_ && Py_IsInitialized()) {
    py::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject*>(obj_));
  }
}

std::vector<std::string> call_resolver(const PyObjectRef& resolver, const std::string& op,
                                       c10::DeviceIndex device) {
  py::gil_scoped_acquire gil;
  py::handle fn(static_cast<PyObject*>(resolver.get()));
  try {
    return fn(op, static_cast<int>(device)).cast<std::vector<std::string>>();
  } catch (py::error_already_set& e) {
    TORCH_CHECK(false, "flagos: routing resolver failed for ", op, ": ", e.what());
  }
}

bool call_python_provider(const PyObjectRef& provider, const c10::OperatorHandle& op,
                          torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  size_t n = arguments.size();
  py::gil_scoped_acquire gil;
  py::tuple args(0);
  py::dict kwargs;
  std::vector<py::object> positional;
  for (size_t i = 0; i < n; ++i) {
    py::object v = torch::jit::toPyObject((*stack)[stack->size() - n + i]);
    if (arguments[i].kwarg_only()) kwargs[py::str(arguments[i].name())] = v;
    else positional.push_back(v);
  }
  args = py::cast(positional);
  py::object result;
  try {
    result = py::handle(static_cast<PyObject*>(provider.get()))(op_full_name(op), args, kwargs);
  } catch (py::error_already_set& e) {
    // Re-raise as a C++ error carrying the Python message (the type is kept by torch's
    // translation only for builtin errors; the text names the provider's failure).
    // The message is the exception's type and text, without pybind11's traceback dump.
    std::string what = e.what();
    try {
      what = py::str(e.type().attr("__name__")).cast<std::string>() + ": " +
             py::str(e.value()).cast<std::string>();
    } catch (...) {
    }
    throw std::runtime_error(std::string("flagos: Python provider failed on ") +
                             op_full_name(op) + ": " + what);
  }
  if (result.is(py::handle(Py_NotImplemented))) return false;
  torch::jit::drop(*stack, n);
  const auto& returns = schema.returns();
  if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(result, returns[0].type()));
  } else if (!returns.empty()) {
    auto tup = result.cast<py::tuple>();
    TORCH_CHECK(tup.size() == returns.size(), "flagos: provider returned ", tup.size(),
                " values for ", op_full_name(op), ", which returns ", returns.size());
    for (size_t i = 0; i < returns.size(); ++i) {
      stack->push_back(torch::jit::toIValue(tup[i], returns[i].type()));
    }
  }
  return true;
}

}  // namespace flagos

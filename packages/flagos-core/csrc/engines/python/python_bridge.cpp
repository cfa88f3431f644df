#include "engines/python/python_bridge.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include "router/dispatcher.h"

namespace py = pybind11;

namespace flagos {

std::unique_lock<std::recursive_mutex> lock_releasing_gil(std::recursive_mutex& mutex) {
  std::unique_lock<std::recursive_mutex> lock(mutex, std::try_to_lock);
  if (lock.owns_lock()) return lock;
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release nogil;
    lock.lock();
  } else {
    lock.lock();
  }
  return lock;
}

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

namespace {

// How a callable takes an op's arguments. PROVIDER: every schema argument, kwarg-only ones
// as keywords, as toPyObject makes them. KERNEL: as torch calls a Python kernel registered
// with torch.library (what a kernel library such as FlagGems is written against): trailing
// positional and kwarg-only arguments equal to their schema default are left out, dtypes,
// layouts and memory formats are their Python objects.
// OP_KERNEL: as KERNEL, for the op's own kernel: its exceptions reach the caller as they
// are (as from a torch.library kernel), not as a provider's failure.
enum class Convention { PROVIDER, KERNEL, OP_KERNEL };

bool is_default(const c10::Argument& arg, const c10::IValue& v) {
  return arg.default_value().has_value() && *arg.default_value() == v;
}

bool has_kind(const c10::Argument& arg, c10::TypeKind kind) {
  const auto& t = arg.real_type();
  if (t->kind() == kind) return true;
  auto opt = t->cast<c10::OptionalType>();
  return opt && opt->getElementType()->kind() == kind;
}

py::object kernel_arg(const c10::Argument& arg, const c10::IValue& v) {
  if (v.isNone()) return py::none();
  if (has_kind(arg, c10::TypeKind::ScalarTypeType)) {
    return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(
        torch::getTHPDtype(static_cast<c10::ScalarType>(v.toInt()))));
  }
  if (has_kind(arg, c10::TypeKind::LayoutType)) {
    return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(
        torch::getTHPLayout(static_cast<c10::Layout>(v.toInt()))));
  }
  if (has_kind(arg, c10::TypeKind::MemoryFormatType)) {
    return py::reinterpret_borrow<py::object>(
        torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(v.toInt())));
  }
  return torch::jit::toPyObject(v);
}

// Calls fn([op_name,] *args, **kwargs) with the op's schema arguments from the stack and
// replaces them by its results; false (stack untouched) when fn returns NotImplemented.
// The caller holds the GIL.
bool call_on_stack(py::handle fn, Convention convention, const c10::OperatorHandle& op,
                   torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  size_t n = arguments.size();
  const c10::IValue* in = stack->data() + stack->size() - n;
  bool kernel = convention != Convention::PROVIDER;
  size_t kwarg_start = n;  // the first kwarg-only argument
  while (kwarg_start > 0 && arguments[kwarg_start - 1].kwarg_only()) --kwarg_start;
  size_t n_positional = kwarg_start;
  while (kernel && n_positional > 0 && is_default(arguments[n_positional - 1], in[n_positional - 1])) {
    --n_positional;
  }
  py::tuple args(n_positional);
  for (size_t i = 0; i < n_positional; ++i) {
    args[i] = kernel ? kernel_arg(arguments[i], in[i]) : torch::jit::toPyObject(in[i]);
  }
  py::dict kwargs;
  for (size_t i = kwarg_start; i < n; ++i) {
    if (kernel && is_default(arguments[i], in[i])) continue;
    kwargs[py::str(arguments[i].name())] =
        kernel ? kernel_arg(arguments[i], in[i]) : torch::jit::toPyObject(in[i]);
  }
  py::object result;
  try {
    if (!kernel) {
      result = fn(op_full_name(op), args, kwargs);
    } else {
      PyObject* r = PyObject_Call(fn.ptr(), args.ptr(), kwargs.ptr());
      if (!r) throw py::error_already_set();
      result = py::reinterpret_steal<py::object>(r);
    }
  } catch (py::error_already_set& e) {
    if (convention == Convention::OP_KERNEL) throw;  // the op's own error, as it is
    // Out of memory stays torch.OutOfMemoryError (the numbers are in its text).
    static PyObject* torch_oom = [] {  // kept for the process (never released at exit)
      return py::object(py::module_::import("torch").attr("OutOfMemoryError")).release().ptr();
    }();
    if (e.matches(PyExc_MemoryError) || e.matches(torch_oom)) {
      std::string text = py::str(e.value()).cast<std::string>();
      TORCH_CHECK_WITH(OutOfMemoryError, false, "flagos: ", op_full_name(op), ": ", text);
    }
    // Re-raise as a C++ error carrying the Python message (the type is kept by torch's
    // translation only for builtin errors; the text names the provider's failure).
    // The message is the exception's type and text, without pybind11's traceback dump.
    std::string what = e.what();
    try {
      what = py::str(e.type().attr("__name__")).cast<std::string>() + ": " +
             py::str(e.value()).cast<std::string>();
    } catch (...) {
    }
    throw std::runtime_error(std::string("flagos: ") + (kernel ? "kernel" : "Python provider") +
                             " failed on " + op_full_name(op) + ": " + what);
  }
  if (result.is(py::handle(Py_NotImplemented))) return false;
  torch::jit::drop(*stack, n);
  const auto& returns = schema.returns();
  if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(result, returns[0].type()));
  } else if (!returns.empty()) {
    auto tup = result.cast<py::sequence>();
    TORCH_CHECK(tup.size() == returns.size(), "flagos: provider returned ", tup.size(),
                " values for ", op_full_name(op), ", which returns ", returns.size());
    for (size_t i = 0; i < returns.size(); ++i) {
      stack->push_back(torch::jit::toIValue(tup[i], returns[i].type()));
    }
  }
  return true;
}

}  // namespace

bool call_python_provider(const PyObjectRef& provider, const c10::OperatorHandle& op,
                          torch::jit::Stack* stack) {
  py::gil_scoped_acquire gil;
  return call_on_stack(py::handle(static_cast<PyObject*>(provider.get())), Convention::PROVIDER, op, stack);
}

bool call_python_kernel(const PyObjectRef& kernel, const c10::OperatorHandle& op,
                        torch::jit::Stack* stack) {
  py::gil_scoped_acquire gil;
  return call_on_stack(py::handle(static_cast<PyObject*>(kernel.get())), Convention::KERNEL, op, stack);
}

bool call_python_op_kernel(const PyObjectRef& kernel, const c10::OperatorHandle& op,
                           torch::jit::Stack* stack) {
  py::gil_scoped_acquire gil;
  return call_on_stack(py::handle(static_cast<PyObject*>(kernel.get())), Convention::OP_KERNEL, op, stack);
}

PyObjectRef call_kernel_resolver(const PyObjectRef& resolver, const std::string& op) {
  py::gil_scoped_acquire gil;
  py::handle fn(static_cast<PyObject*>(resolver.get()));
  try {
    py::object kernel = fn(op);
    return kernel.is_none() ? PyObjectRef() : PyObjectRef(kernel.ptr());
  } catch (py::error_already_set& e) {
    TORCH_CHECK(false, "flagos: kernel resolver failed for ", op, ": ", e.what());
  }
}

}  // namespace flagos

// The dispatcher's calls into Python (resolver, Python providers), GIL taken here only.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace flagos {

// An owned reference to a Python object, safe to copy and destroy without the GIL held.
class PyObjectRef {
 public:
  PyObjectRef() = default;
  explicit PyObjectRef(void* obj);  // takes a new reference
  PyObjectRef(const PyObjectRef& other);
  PyObjectRef& operator=(const PyObjectRef& other);
  // Moves take no GIL (callers may hold locks another thread waits on with the GIL).
  PyObjectRef(PyObjectRef&& other) noexcept : obj_(other.obj_) { other.obj_ = nullptr; }
  PyObjectRef& operator=(PyObjectRef&& other) noexcept {
    std::swap(obj_, other.obj_);
    return *this;
  }
  ~PyObjectRef();
  explicit operator bool() const { return obj_ != nullptr; }
  void* get() const { return obj_; }

 private:
  void* obj_ = nullptr;
};

std::vector<std::string> call_resolver(const PyObjectRef& resolver, const std::string& op,
                                       c10::DeviceIndex device);
// fn(op_name, args, kwargs); returns false (stack untouched) when fn returns NotImplemented.
bool call_python_provider(const PyObjectRef& fn, const c10::OperatorHandle& op,
                          torch::jit::Stack* stack);
// resolver(op_name) -> a kernel, or an empty reference for None (foreign_kernels.h).
PyObjectRef call_kernel_resolver(const PyObjectRef& resolver, const std::string& op);
// kernel(*args, **kwargs) with the op's schema arguments from the stack; returns false
// (stack untouched) when the kernel returns NotImplemented. Takes the GIL.
bool call_python_kernel(const PyObjectRef& kernel, const c10::OperatorHandle& op,
                        torch::jit::Stack* stack);
// The same for the op's own kernel: a Python exception propagates as it is.
bool call_python_op_kernel(const PyObjectRef& kernel, const c10::OperatorHandle& op,
                           torch::jit::Stack* stack);

// `mutex` locked; waited for without the GIL where this thread holds it, so that a thread
// holding the lock can take the GIL (a Python kernel) while others wait.
std::unique_lock<std::recursive_mutex> lock_releasing_gil(std::recursive_mutex& mutex);

}  // namespace flagos

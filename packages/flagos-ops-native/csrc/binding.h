// What the manifest binds: per op overload, a calling convention and, per dtype, the
// typed plan (GetWorkspaceSize) and execute functions of the vendor library.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "flagos_native/kernel_abi.h"
#include "library.h"

namespace flagos_native {

enum class Convention {
  UNARY,
  BINARY,
  REDUCTION,
  MATMUL,
  SOFTMAX,
  SOFTMAX_BACKWARD,
  LAYER_NORM,
  LAYER_NORM_BACKWARD,
  INDEX_SELECT,
  EMBEDDING_BACKWARD,
  RMS_NORM,
  RMS_NORM_BACKWARD,
  ATTENTION,
  ATTENTION_BACKWARD,
  CUBLAS_GEMM,  // one phase: cuBLAS's own gemm call (cublas_gemm.cpp)
};
// "unary" -> UNARY, ...; false for an unknown name.
bool parse_convention(const std::string& name, Convention* out);

constexpr int kDtypes = 7;  // the flagos_native_dtype_t codes, FLOAT32 .. FLOAT64

struct Kernel {
  void* plan = nullptr;  // the convention's flagos_native_*_fn, stored untyped
  flagos_native_execute_fn execute = nullptr;
  explicit operator bool() const { return plan && execute; }
};

struct Binding {
  Convention convention;
  std::array<Kernel, kDtypes> kernels;  // by flagos_native_dtype_t; empty: not served
  std::shared_ptr<Library> library;
  bool one_phase = false;       // the kernel is `plan` alone (no execute symbol)
  std::vector<void*> helpers;   // the convention's library-level symbols, in its order
};

// Which schema shape of the bound op a call arrives with.
enum class FormKind { FUNCTIONAL, INPLACE, OUT };

struct Form {
  const Binding* binding;
  FormKind kind;
  size_t n_args;      // schema arguments
  size_t n_inputs;    // arguments before the out= arguments
  size_t first_out;   // index of the first out= argument (OUT)
  size_t n_outs;
};
Form make_form(const c10::OperatorHandle& op, const Binding* binding);

// Runs `op` through the binding's convention; false (stack untouched) to decline.
bool run_convention(const Form& form, const c10::OperatorHandle& op, torch::jit::Stack* stack,
                    c10::DeviceIndex device);

}  // namespace flagos_native

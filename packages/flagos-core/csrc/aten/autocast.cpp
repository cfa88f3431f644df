// torch.autocast("flagos"): the standard autocast op policy (the lists PyTorch keeps in
// ATen/autocast_mode.h for every backend) registered for AutocastPrivateUse1. Ops that
// are not listed fall through and run in the dtype they were given.
#include <ATen/Operators.h>
#include <torch/version.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {

// The op lists name their argument types unqualified, and which types appear differs
// between torch releases (2.11's lists use DimnameList, for one).
using at::Device;
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
// Named tensors (and DimnameList in the autocast lists) exist up to torch 2.12.
using at::Dimname;
using at::DimnameList;
#endif
using at::Generator;
using at::ITensorListRef;
using at::Layout;
using at::MemoryFormat;
using at::Scalar;
using at::ScalarType;
using at::Tensor;
using at::TensorList;
using c10::IntArrayRef;
using c10::SymIntArrayRef;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define FLAGOS_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(FLAGOS_AUTOCAST_LOWER)
#define FLAGOS_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(FLAGOS_AUTOCAST_FP32)
#define FLAGOS_AUTOCAST_FP32_SET_OPT_DTYPE(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(FLAGOS_AUTOCAST_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define FLAGOS_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(FLAGOS_AUTOCAST_PROMOTE)
}

}  // namespace

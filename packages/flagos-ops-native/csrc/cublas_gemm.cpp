// The cublas_gemm convention: mm, bmm and addmm through cuBLAS's own strided-batched gemm
// (cublasGemmStridedBatchedEx), a library nobody here wrote, opened at run time like the
// cuda HAL opens libcuda: no CUDA toolkit or header at build time, so the C types below
// are cuBLAS's ABI as documented (cublas_api.h), and the manifest names the symbols.
//
// Row-major tensors are column-major transposes: out[m,n] = a[m,k] @ b[k,n] is computed as
// out^T = b^T @ a^T, each operand passed as is (N) or transposed (T) by its strides.
#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <vector>

#include "call.h"

namespace flagos_native {
namespace {

using cublasHandle_t = void*;
using GemmStridedBatchedEx = int (*)(cublasHandle_t handle, int transa, int transb, int m,
                                     int n, int k, const void* alpha, const void* A, int Atype,
                                     int lda, long long strideA, const void* B, int Btype,
                                     int ldb, long long strideB, const void* beta, void* C,
                                     int Ctype, int ldc, long long strideC, int batchCount,
                                     int computeType, int algo);
using Create = int (*)(cublasHandle_t* handle);
using SetStream = int (*)(cublasHandle_t handle, void* stream);

constexpr int kOpN = 0, kOpT = 1;                  // cublasOperation_t
constexpr int kComputeF32 = 68;                    // CUBLAS_COMPUTE_32F (no TF32)
constexpr int kGemmDefault = -1;                   // CUBLAS_GEMM_DEFAULT

int cuda_dtype(c10::ScalarType t) {                // cudaDataType_t
  switch (t) {
    case c10::kFloat: return 0;                    // CUDA_R_32F
    case c10::kHalf: return 2;                     // CUDA_R_16F
    case c10::kBFloat16: return 14;                // CUDA_R_16BF
    default: return -1;
  }
}

// How cuBLAS sees a row-major [rows, cols] matrix (the last two dims of t): N with the
// leading dimension of its rows, T when it is a transposed view, or nothing (decline).
struct Operand {
  int op;
  int64_t ld;
};
std::optional<Operand> operand(const at::Tensor& t) {
  int64_t r = t.size(-2), c = t.size(-1), s0 = t.stride(-2), s1 = t.stride(-1);
  if ((s1 == 1 || c == 1) && s0 >= std::max<int64_t>(1, c)) return Operand{kOpN, s0};
  if ((s0 == 1 || r == 1) && s1 >= std::max<int64_t>(1, r)) return Operand{kOpT, s1};
  return std::nullopt;
}

// One handle per thread, device and cuBLAS (handles are not for concurrent use), kept for
// the thread's life: a library is never closed, and the manifest bound again (a routes
// reload) names the same cuBLAS, whose handle is reused rather than made anew. The
// library's helpers are [cublasCreate_v2, cublasSetStream_v2].
constexpr int kStatusAllocFailed = 3;  // CUBLAS_STATUS_ALLOC_FAILED

cublasHandle_t handle_for(const Binding& b, c10::DeviceIndex device) {
  struct Slot {
    c10::DeviceIndex device;
    void* create;
    cublasHandle_t handle;
  };
  thread_local std::vector<Slot> handles;
  void* create = b.helpers.at(0);
  for (const Slot& s : handles)
    if (s.device == device && s.create == create) return s.handle;
  cublasHandle_t h = nullptr;
  int st = reinterpret_cast<Create>(create)(&h);
  if (st == kStatusAllocFailed) {
    // cuBLAS allocates device memory of its own, which flagos' cache may be holding.
    c10::getDeviceAllocator(c10::DeviceType::PrivateUse1)->emptyCache();
    st = reinterpret_cast<Create>(create)(&h);
  }
  TORCH_CHECK_WITH(OutOfMemoryError, st != kStatusAllocFailed,
                   "flagos native: cuBLAS could not allocate the device memory of a handle on "
                   "flagos:", device, " (cublasCreate: CUBLAS_STATUS_ALLOC_FAILED), even after "
                   "flagos released its cached blocks; free tensors, or route mm to another provider");
  TORCH_CHECK(st == 0 && h, "flagos native: cublasCreate failed (status ", st, ")");
  handles.push_back({device, create, h});
  return h;
}

}  // namespace

bool run_cublas_gemm(Call& c) {
  auto mc = matmul_call(c);
  if (!mc) return false;
  const at::Tensor &a = mc->a, &b = mc->b, &bias = mc->bias, &out = mc->out;
  const std::vector<int64_t>& shape = mc->shape;
  bool addmm = mc->addmm;
  const Kernel* k = mc->kernel;
  int dtype = cuda_dtype(a.scalar_type());
  if (dtype < 0) return false;
  float alpha = float(mc->alpha), beta = addmm ? float(mc->beta) : 0.0f;
  int r = int(a.dim()) - 2;
  int64_t m = a.size(r), kk = a.size(r + 1), n = b.size(r + 1);
  int64_t batches = a.dim() == 3 ? a.size(0) : 1;
  auto oa = operand(a), ob = operand(b);
  if (!oa || !ob) return false;
  int64_t lim = int64_t(1) << 31;
  if (m >= lim || n >= lim || kk >= lim || batches >= lim || oa->ld >= lim || ob->ld >= lim)
    return false;
  if (out.numel() == 0) {
    c.finish({out});
    return true;
  }
  // addmm: out starts as the broadcast bias (stream-ordered device copy), then beta * out.
  if (addmm && beta != 0.0f && !out.is_same(bias)) {
    at::Tensor(out).copy_(bias.expand(shape));
  }
  if (kk == 0) {  // an empty product: beta * bias (or zeros)
    if (addmm && beta != 0.0f) at::Tensor(out).mul_(beta);
    else at::Tensor(out).zero_();
    c.finish({out});
    return true;
  }
  const Binding& bind = *c.form().binding;
  cublasHandle_t h = handle_for(bind, c.device());
  int st = reinterpret_cast<SetStream>(bind.helpers.at(1))(h, native_stream(c.device()));
  TORCH_CHECK(st == 0, "flagos native: cublasSetStream failed (status ", st, ")");
  long long stride_a = a.dim() == 3 ? a.stride(0) : 0, stride_b = b.dim() == 3 ? b.stride(0) : 0;
  float used_beta = beta;
  st = reinterpret_cast<GemmStridedBatchedEx>(k->plan)(
      h, ob->op, oa->op, int(n), int(m), int(kk), &alpha, b.const_data_ptr(), dtype, int(ob->ld),
      stride_b, a.const_data_ptr(), dtype, int(oa->ld), stride_a, &used_beta,
      out.mutable_data_ptr(), dtype, int(n), (long long)(m * n), int(batches), kComputeF32,
      kGemmDefault);
  TORCH_CHECK(st == 0, "flagos native: cublasGemmStridedBatchedEx failed (status ", st, ")");
  c.finish({out});
  return true;
}

}  // namespace flagos_native

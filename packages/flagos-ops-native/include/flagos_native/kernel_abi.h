/*
 * flagos-ops-native: the calling conventions a vendor kernel library can implement so that
 * its kernels are bound to ATen ops from a manifest, without hand-written glue.
 *
 * Every convention is a two-phase call, as in aclnn:
 *
 *     status = XxxGetWorkspaceSize(<tensors and attributes>, &workspace_size, &executor);
 *     status = Xxx(workspace, workspace_size, executor, stream);
 *
 * Phase 1 checks the call and plans it on the host (it must not touch device memory);
 * it returns FLAGOS_NATIVE_UNSUPPORTED when this call (dtype, layout, size) is one the
 * library does not serve: flagos then hands the op to the next provider of its chain.
 * Phase 2 queues the work on `stream` (the HAL stream's native handle) and returns; the
 * library owns the executor and frees it once the work has run. The workspace is device
 * memory from the flagos allocator, valid for the work queued on `stream`.
 *
 * Tensors are passed as descriptors: `data` is device memory (the first element), sizes
 * and strides are in elements. Outputs are already sized, and contiguous except for the
 * unary and binary conventions, whose outputs may have any dense, non-overlapping layout.
 *
 * The typedefs below are the exact C types flagos calls through (never varargs); the
 * build of a manifest compiles a check that the vendor header declares every bound
 * symbol with these types.
 */
#ifndef FLAGOS_NATIVE_KERNEL_ABI_H_
#define FLAGOS_NATIVE_KERNEL_ABI_H_

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLAGOS_NATIVE_MAX_DIMS 8

typedef enum flagos_native_dtype {
  FLAGOS_NATIVE_FLOAT32 = 0,
  FLAGOS_NATIVE_FLOAT16 = 1,
  FLAGOS_NATIVE_BFLOAT16 = 2,
  FLAGOS_NATIVE_INT64 = 3,
  FLAGOS_NATIVE_INT32 = 4,
  FLAGOS_NATIVE_BOOL = 5,
  FLAGOS_NATIVE_FLOAT64 = 6
} flagos_native_dtype_t;

typedef enum flagos_native_status {
  FLAGOS_NATIVE_SUCCESS = 0,
  FLAGOS_NATIVE_UNSUPPORTED = 1, /* phase 1: not this call; flagos uses the next provider */
  FLAGOS_NATIVE_INVALID = 2,     /* a bad argument: an error raised to the caller */
  FLAGOS_NATIVE_FAILED = 3       /* the device or runtime failed: an error */
} flagos_native_status_t;

typedef struct flagos_native_tensor {
  void* data;
  int32_t dtype; /* flagos_native_dtype_t */
  int32_t ndim;  /* 0 .. FLAGOS_NATIVE_MAX_DIMS */
  int64_t sizes[FLAGOS_NATIVE_MAX_DIMS];
  int64_t strides[FLAGOS_NATIVE_MAX_DIMS];
} flagos_native_tensor_t;

typedef struct flagos_native_executor flagos_native_executor_t; /* opaque, library-owned */

#define FN_T const flagos_native_tensor_t*
#define FN_PLAN uint64_t* workspace_size, flagos_native_executor_t** executor

/* Phase 2 of every convention. */
typedef int32_t (*flagos_native_execute_fn)(void* workspace, uint64_t workspace_size,
                                            flagos_native_executor_t* executor, void* stream);

/* unary: out = f(self). */
typedef int32_t (*flagos_native_unary_fn)(FN_T self, FN_T out, FN_PLAN);
/* binary: out = f(self, other, scalar); inputs broadcast to out's shape through their
 * strides (0 on broadcast dimensions); `scalar` is alpha (add, sub) or the op's Scalar
 * argument (threshold_backward), 1.0 when the op has none. */
typedef int32_t (*flagos_native_binary_fn)(FN_T self, FN_T other, double scalar, FN_T out,
                                           FN_PLAN);
/* reduction over `dims` (sorted, non-negative; all dims when ndims == 0). */
typedef int32_t (*flagos_native_reduction_fn)(FN_T self, const int64_t* dims, int32_t ndims,
                                              bool keepdim, FN_T out, FN_PLAN);
/* matmul: out = beta * bias + alpha * (a @ b); bias NULL for mm/bmm (a, b: 2-D, or 3-D
 * batched), broadcast to out through its strides for addmm. */
typedef int32_t (*flagos_native_matmul_fn)(FN_T bias, FN_T a, FN_T b, double beta,
                                           double alpha, FN_T out, FN_PLAN);
/* softmax / log_softmax over `dim` (non-negative). */
typedef int32_t (*flagos_native_softmax_fn)(FN_T self, int64_t dim, FN_T out, FN_PLAN);
/* the gradient of softmax / log_softmax from its output. */
typedef int32_t (*flagos_native_softmax_backward_fn)(FN_T grad_output, FN_T output,
                                                     int64_t dim, FN_T grad_input, FN_PLAN);
/* layer norm over the last `normalized_numel` elements of each row; weight, bias may be
 * NULL; mean and rstd (float32 for reduced-precision inputs, one per row). */
typedef int32_t (*flagos_native_norm_fn)(FN_T input, int64_t normalized_numel, FN_T weight,
                                         FN_T bias, double eps, FN_T out, FN_T mean, FN_T rstd,
                                         FN_PLAN);
/* its backward; any of the three outputs may be NULL (not asked for). */
typedef int32_t (*flagos_native_norm_backward_fn)(FN_T grad_out, FN_T input,
                                                  int64_t normalized_numel, FN_T mean,
                                                  FN_T rstd, FN_T weight, FN_T grad_input,
                                                  FN_T grad_weight, FN_T grad_bias, FN_PLAN);
/* embedding_dense_backward: grad_weight[num_weights, dim] = scatter-add of grad rows by
 * indices (int64), rows == padding_idx skipped (padding_idx < 0: none). */
typedef int32_t (*flagos_native_embedding_backward_fn)(FN_T grad, FN_T indices,
                                                       int64_t padding_idx, FN_T grad_weight,
                                                       FN_PLAN);
/* index_select along `dim` (the forward of embedding: dim 0 of the weight). */
typedef int32_t (*flagos_native_index_select_fn)(FN_T self, int64_t dim, FN_T index, FN_T out,
                                                 FN_PLAN);

/* rms norm over the last `normalized_numel` elements of each row:
 * out = input * rstd * weight, rstd = 1 / sqrt(mean(input^2) + eps) (float32 for
 * reduced-precision inputs, the input's dtype else; one per row); weight may be NULL. */
typedef int32_t (*flagos_native_rms_norm_fn)(FN_T input, int64_t normalized_numel, FN_T weight,
                                             double eps, FN_T out, FN_T rstd, FN_PLAN);
/* its backward; grad_input or grad_weight may be NULL (not asked for). */
typedef int32_t (*flagos_native_rms_norm_backward_fn)(FN_T grad_out, FN_T input,
                                                      int64_t normalized_numel, FN_T rstd,
                                                      FN_T weight, FN_T grad_input,
                                                      FN_T grad_weight, FN_PLAN);
/* scaled dot-product attention, q [B, Hq, Lq, E], k [B, Hk, Lk, E], v [B, Hk, Lk, Ev]
 * (Hq a multiple of Hk: query head h reads key/value head h / (Hq / Hk)); `mask` NULL, or
 * broadcast to [B, Hq, Lq, Lk] through its strides: bool (false: masked out) or additive
 * of q's dtype; `is_causal`: query i sees keys j <= i. out [B, Hq, Lq, Ev] and the
 * float32 logsumexp of each score row, lse [B, Hq, Lq]. */
typedef int32_t (*flagos_native_attention_fn)(FN_T query, FN_T key, FN_T value, FN_T mask,
                                              bool is_causal, double scale, FN_T out, FN_T lse,
                                              FN_PLAN);
/* its backward from out and lse; any of the three gradients may be NULL. */
typedef int32_t (*flagos_native_attention_backward_fn)(FN_T grad_out, FN_T query, FN_T key,
                                                       FN_T value, FN_T mask, FN_T out,
                                                       FN_T lse, bool is_causal, double scale,
                                                       FN_T grad_query, FN_T grad_key,
                                                       FN_T grad_value, FN_PLAN);

/* The ABI version a library reports through the manifest's version symbol. */
typedef uint32_t (*flagos_native_version_fn)(void);
/* The library's text for its last failure on this thread (optional). */
typedef const char* (*flagos_native_error_fn)(void);

#undef FN_T
#undef FN_PLAN

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLAGOS_NATIVE_KERNEL_ABI_H_ */

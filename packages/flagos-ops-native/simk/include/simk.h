/*
 * simk: the reference kernel library of the simulated flagos device.
 *
 * What a chip vendor's operator library looks like to flagos-ops-native: C kernels with
 * an aclnn-like two-phase API (simkXxxGetWorkspaceSize plans the call on the host,
 * simkXxx queues it on a stream), float32 / float16 / bfloat16, strided inputs. The
 * kernels run on the sim stream's worker thread (flagos_hal/sim_runtime.h), on device
 * memory, as a real library's kernels run on its device. Its manifest is
 * flagos_ops_native/manifests/simk.toml.
 */
#ifndef SIMK_H_
#define SIMK_H_

#include "flagos_native/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SIMK_ABI_VERSION ((1u << 16) | 0u) /* major 1, minor 0 */

#if defined(_WIN32)
#define SIMK_API __declspec(dllexport)
#else
#define SIMK_API __attribute__((visibility("default")))
#endif

typedef flagos_native_tensor_t simkTensor;
typedef flagos_native_executor_t simkExecutor;

/* (major << 16 | minor) of the API this library implements. */
SIMK_API uint32_t simkGetAbiVersion(void);
/* What went wrong in this thread's last failed call ("" if nothing). */
SIMK_API const char* simkGetLastError(void);

#define SIMK_EXECUTE(name)                                                              \
  SIMK_API int32_t name(void* workspace, uint64_t workspace_size, simkExecutor* executor, \
                        void* stream)
#define SIMK_UNARY(name)                                                              \
  SIMK_API int32_t name##GetWorkspaceSize(const simkTensor* self, const simkTensor* out, \
                                          uint64_t* workspace_size, simkExecutor** executor); \
  SIMK_EXECUTE(name)
#define SIMK_BINARY(name)                                                             \
  SIMK_API int32_t name##GetWorkspaceSize(const simkTensor* self, const simkTensor* other, \
                                          double scalar, const simkTensor* out,          \
                                          uint64_t* workspace_size, simkExecutor** executor); \
  SIMK_EXECUTE(name)

/* Elementwise, unary. */
SIMK_UNARY(simkNeg);
SIMK_UNARY(simkExp);
SIMK_UNARY(simkLog);
SIMK_UNARY(simkSqrt);
SIMK_UNARY(simkRsqrt);
SIMK_UNARY(simkSin);
SIMK_UNARY(simkCos);
SIMK_UNARY(simkTanh);
SIMK_UNARY(simkSigmoid);
SIMK_UNARY(simkRelu);
SIMK_UNARY(simkSilu);
SIMK_UNARY(simkAbs);
SIMK_UNARY(simkReciprocal);
/* Elementwise, binary (with broadcasting). */
SIMK_BINARY(simkAdd);              /* self + scalar * other */
SIMK_BINARY(simkSub);              /* self - scalar * other */
SIMK_BINARY(simkMul);
SIMK_BINARY(simkDiv);
SIMK_BINARY(simkMaximum);
SIMK_BINARY(simkMinimum);
SIMK_BINARY(simkSiluBackward);     /* (grad_output, self) */
SIMK_BINARY(simkSigmoidBackward);  /* (grad_output, output) */
SIMK_BINARY(simkTanhBackward);     /* (grad_output, output) */
SIMK_BINARY(simkThresholdBackward);/* (grad_output, self), scalar = threshold */

/* Reductions. */
SIMK_API int32_t simkSumGetWorkspaceSize(const simkTensor* self, const int64_t* dims, int32_t ndims,
                                         bool keepdim, const simkTensor* out,
                                         uint64_t* workspace_size, simkExecutor** executor);
SIMK_EXECUTE(simkSum);
SIMK_API int32_t simkMeanGetWorkspaceSize(const simkTensor* self, const int64_t* dims, int32_t ndims,
                                          bool keepdim, const simkTensor* out,
                                          uint64_t* workspace_size, simkExecutor** executor);
SIMK_EXECUTE(simkMean);

/* Matrix products: out = beta * bias + alpha * a @ b (bias NULL: mm, bmm). */
SIMK_API int32_t simkMatmulGetWorkspaceSize(const simkTensor* bias, const simkTensor* a,
                                            const simkTensor* b, double beta, double alpha,
                                            const simkTensor* out, uint64_t* workspace_size,
                                            simkExecutor** executor);
SIMK_EXECUTE(simkMatmul);

/* Softmax family. */
SIMK_API int32_t simkSoftmaxGetWorkspaceSize(const simkTensor* self, int64_t dim,
                                             const simkTensor* out, uint64_t* workspace_size,
                                             simkExecutor** executor);
SIMK_EXECUTE(simkSoftmax);
SIMK_API int32_t simkLogSoftmaxGetWorkspaceSize(const simkTensor* self, int64_t dim,
                                                const simkTensor* out, uint64_t* workspace_size,
                                                simkExecutor** executor);
SIMK_EXECUTE(simkLogSoftmax);
SIMK_API int32_t simkSoftmaxBackwardGetWorkspaceSize(const simkTensor* grad_output,
                                                     const simkTensor* output, int64_t dim,
                                                     const simkTensor* grad_input,
                                                     uint64_t* workspace_size,
                                                     simkExecutor** executor);
SIMK_EXECUTE(simkSoftmaxBackward);
SIMK_API int32_t simkLogSoftmaxBackwardGetWorkspaceSize(const simkTensor* grad_output,
                                                        const simkTensor* output, int64_t dim,
                                                        const simkTensor* grad_input,
                                                        uint64_t* workspace_size,
                                                        simkExecutor** executor);
SIMK_EXECUTE(simkLogSoftmaxBackward);

/* Layer normalization over the last normalized_numel elements of each row. */
SIMK_API int32_t simkLayerNormGetWorkspaceSize(const simkTensor* input, int64_t normalized_numel,
                                               const simkTensor* weight, const simkTensor* bias,
                                               double eps, const simkTensor* out,
                                               const simkTensor* mean, const simkTensor* rstd,
                                               uint64_t* workspace_size, simkExecutor** executor);
SIMK_EXECUTE(simkLayerNorm);
SIMK_API int32_t simkLayerNormBackwardGetWorkspaceSize(
    const simkTensor* grad_out, const simkTensor* input, int64_t normalized_numel,
    const simkTensor* mean, const simkTensor* rstd, const simkTensor* weight,
    const simkTensor* grad_input, const simkTensor* grad_weight, const simkTensor* grad_bias,
    uint64_t* workspace_size, simkExecutor** executor);
SIMK_EXECUTE(simkLayerNormBackward);

/* RMS normalization over the last normalized_numel elements of each row (weight may be
 * NULL), and its gradient (grad_input or grad_weight may be NULL). */
SIMK_API int32_t simkRmsNormGetWorkspaceSize(const simkTensor* input, int64_t normalized_numel,
                                             const simkTensor* weight, double eps,
                                             const simkTensor* out, const simkTensor* rstd,
                                             uint64_t* workspace_size, simkExecutor** executor);
SIMK_EXECUTE(simkRmsNorm);
SIMK_API int32_t simkRmsNormBackwardGetWorkspaceSize(
    const simkTensor* grad_out, const simkTensor* input, int64_t normalized_numel,
    const simkTensor* rstd, const simkTensor* weight, const simkTensor* grad_input,
    const simkTensor* grad_weight, uint64_t* workspace_size, simkExecutor** executor);
SIMK_EXECUTE(simkRmsNormBackward);

/* Scaled dot-product attention (flagos_native_attention_fn) and its gradient. */
SIMK_API int32_t simkAttentionGetWorkspaceSize(const simkTensor* query, const simkTensor* key,
                                               const simkTensor* value, const simkTensor* mask,
                                               bool is_causal, double scale,
                                               const simkTensor* out, const simkTensor* lse,
                                               uint64_t* workspace_size, simkExecutor** executor);
SIMK_EXECUTE(simkAttention);
SIMK_API int32_t simkAttentionBackwardGetWorkspaceSize(
    const simkTensor* grad_out, const simkTensor* query, const simkTensor* key,
    const simkTensor* value, const simkTensor* mask, const simkTensor* out, const simkTensor* lse,
    bool is_causal, double scale, const simkTensor* grad_query, const simkTensor* grad_key,
    const simkTensor* grad_value, uint64_t* workspace_size, simkExecutor** executor);
SIMK_EXECUTE(simkAttentionBackward);

/* Gather and its gradient (embedding). */
SIMK_API int32_t simkIndexSelectGetWorkspaceSize(const simkTensor* self, int64_t dim,
                                                 const simkTensor* index, const simkTensor* out,
                                                 uint64_t* workspace_size, simkExecutor** executor);
SIMK_EXECUTE(simkIndexSelect);
SIMK_API int32_t simkEmbeddingBackwardGetWorkspaceSize(const simkTensor* grad,
                                                       const simkTensor* indices,
                                                       int64_t padding_idx,
                                                       const simkTensor* grad_weight,
                                                       uint64_t* workspace_size,
                                                       simkExecutor** executor);
SIMK_EXECUTE(simkEmbeddingBackward);

#undef SIMK_UNARY
#undef SIMK_BINARY
#undef SIMK_EXECUTE

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SIMK_H_ */

// The simulated device's graph artifact, format "flagos-sim-plan-v1": a list of ops over
// numbered float32 buffers, as the sim graph compiler (python/flagos_hal/sim_compiler)
// writes it. Everything is little-endian and packed:
//
//   char     magic[8] = "FSIMPLN1"
//   u32      n_buffers, n_inputs, n_outputs, n_ops
//   u64      const_bytes
//   buffer   [n_buffers]  { u32 kind; u32 ndim; i64 shape[8]; u64 offset; char name[64] }
//   u32      inputs[n_inputs], outputs[n_outputs]       (buffer ids)
//   op       [n_ops]      { u32 code; u32 n_args; u32 n_attrs; u32 args[n_args]; i64 attrs[n_attrs] }
//   bytes    constants[const_bytes]
//
// A buffer is a graph input, an output, a constant (at `offset` in the constants, uploaded
// to device memory at load), or a temporary (at `offset` in the caller's workspace). An op's
// args are its input buffers, then its output buffer; what its attrs mean is per code
// (kernels.cpp). Float attributes are doubles stored bit for bit in an i64.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flagos_sim {
namespace plan {

constexpr char kMagic[8] = {'F', 'S', 'I', 'M', 'P', 'L', 'N', '1'};
constexpr const char* kFormat = "flagos-sim-plan-v1";
constexpr int kMaxDims = 8;

enum class Kind : uint32_t { kInput = 0, kOutput = 1, kConstant = 2, kTemp = 3 };

enum class Code : uint32_t {
  kUnary = 1,      // attrs: fn                                    args: x, out
  kBinary = 2,     // attrs: fn, ndim, out_shape[ndim], a_strides[ndim], b_strides[ndim]
  kGemm = 3,       // attrs: B M N K  a(bs rs cs)  b(bs rs cs)  has_c c(bs rs cs)  alpha beta
                   // out[b,m,n] = alpha * sum_k a[b,m,k] b[b,k,n] + beta * c[b,m,n]
  kConv2d = 4,     // attrs: N C H W OC KH KW OH OW sh sw ph pw dh dw groups has_bias
  kPool2d = 5,     // attrs: kind(0 max, 1 avg) N C H W KH KW OH OW sh sw ph pw count_include_pad
  kReduce = 6,     // attrs: kind(0 mean, 1 sum, 2 max) outer reduce inner
  kSoftmax = 7,    // attrs: outer axis inner
  kLayerNorm = 8,  // attrs: outer inner eps has_scale has_bias   args: x, [scale], [bias], out
  kStrided = 9,    // attrs: ndim out_shape[ndim] in_strides[ndim] in_offset (transpose, slice)
  kConcat = 10,    // attrs: outer n chunk[n]                      args: x0..x(n-1), out
};

enum class UnaryFn : int64_t { kRelu, kSigmoid, kTanh, kExp, kNeg, kSqrt, kErf, kCopy, kAbs, kLog };
enum class BinaryFn : int64_t { kAdd, kSub, kMul, kDiv, kMax, kMin, kPow };

struct Buffer {
  Kind kind;
  std::vector<int64_t> shape;
  uint64_t offset;
  std::string name;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct Op {
  Code code;
  std::vector<uint32_t> args;
  std::vector<int64_t> attrs;
};

struct Plan {
  std::vector<Buffer> buffers;
  std::vector<uint32_t> inputs, outputs;
  std::vector<Op> ops;
  std::vector<char> constants;
  size_t workspace = 0;  // bytes of temporaries
};

// Parses and checks an artifact; false with `why` set when it is malformed.
bool parse(const void* data, size_t size, Plan* out, std::string* why);

// Checks that op `op`'s attrs describe its buffers (sizes in range); "" when they do.
std::string check_op(const Plan& p, const Op& op);

// Runs op `op` on the resolved buffer addresses (one per plan buffer).
void run_op(const Plan& p, const Op& op, float* const* addr);

}  // namespace plan
}  // namespace flagos_sim

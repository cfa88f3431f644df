// The simulated device's graph kernels: float32 loops over device memory, run on the sim
// stream's worker thread. Each op code's attrs are listed in plan.hpp; check_op proves at
// load time that every index a kernel computes stays inside its buffers, so run_op does no
// checks of its own.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "plan.hpp"

namespace flagos_sim {
namespace plan {
namespace {

double as_double(int64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

// Number of attrs and args each code needs; -1 where it depends on the attrs.
struct Arity {
  int attrs, min_args, max_args;
};
Arity arity(Code c) {
  switch (c) {
    case Code::kUnary: return {1, 2, 2};
    case Code::kBinary: return {-1, 3, 3};
    case Code::kGemm: return {16, 3, 4};
    case Code::kConv2d: return {17, 3, 4};
    case Code::kPool2d: return {14, 2, 2};
    case Code::kReduce: return {4, 2, 2};
    case Code::kSoftmax: return {3, 2, 2};
    case Code::kLayerNorm: return {5, 2, 4};
    case Code::kStrided: return {-1, 2, 2};
    case Code::kConcat: return {-1, 2, 1 << 16};
  }
  return {0, 0, -1};
}

// The largest element index + 1 of a strided view (0 when empty).
int64_t extent(const int64_t* shape, const int64_t* strides, int ndim, int64_t offset = 0) {
  int64_t last = offset;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] == 0) return 0;
    last += (shape[i] - 1) * strides[i];
  }
  return last + 1;
}

float unary(UnaryFn fn, float x) {
  switch (fn) {
    case UnaryFn::kRelu: return x > 0.0f ? x : 0.0f;
    case UnaryFn::kSigmoid: return 1.0f / (1.0f + std::exp(-x));
    case UnaryFn::kTanh: return std::tanh(x);
    case UnaryFn::kExp: return std::exp(x);
    case UnaryFn::kNeg: return -x;
    case UnaryFn::kSqrt: return std::sqrt(x);
    case UnaryFn::kErf: return std::erf(x);
    case UnaryFn::kCopy: return x;
    case UnaryFn::kAbs: return std::fabs(x);
    case UnaryFn::kLog: return std::log(x);
  }
  return x;
}

float binary(BinaryFn fn, float a, float b) {
  switch (fn) {
    case BinaryFn::kAdd: return a + b;
    case BinaryFn::kSub: return a - b;
    case BinaryFn::kMul: return a * b;
    case BinaryFn::kDiv: return a / b;
    case BinaryFn::kMax: return std::max(a, b);
    case BinaryFn::kMin: return std::min(a, b);
    case BinaryFn::kPow: return std::pow(a, b);
  }
  return a;
}

// Visits every index of `shape` (row-major), giving the offsets of up to two strided views.
template <class F>
void for_each_index(int ndim, const int64_t* shape, const int64_t* sa, const int64_t* sb, F f) {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  int64_t idx[kMaxDims] = {0};
  int64_t oa = 0, ob = 0;
  for (int64_t k = 0; k < n; ++k) {
    f(k, oa, ob);
    for (int d = ndim - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        oa += sa[d];
        ob += sb ? sb[d] : 0;
        break;
      }
      oa -= (shape[d] - 1) * sa[d];
      ob -= sb ? (shape[d] - 1) * sb[d] : 0;
      idx[d] = 0;
    }
  }
}

void gemm(const int64_t* a, float* const* addr, const Op& op) {
  int64_t batch = a[0], M = a[1], N = a[2], K = a[3];
  const float* A = addr[op.args[0]];
  const float* B = addr[op.args[1]];
  bool has_c = a[10] != 0;
  const float* C = has_c ? addr[op.args[2]] : nullptr;
  float* out = addr[op.args.back()];
  float alpha = static_cast<float>(as_double(a[14])), beta = static_cast<float>(as_double(a[15]));
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float* Ab = A + bi * a[4];
    const float* Bb = B + bi * a[7];
    float* O = out + bi * M * N;
    for (int64_t m = 0; m < M; ++m) {
      float* row = O + m * N;
      std::fill(row, row + N, 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        float av = Ab[m * a[5] + k * a[6]];
        const float* brow = Bb + k * a[8];
        for (int64_t n = 0; n < N; ++n) row[n] += av * brow[n * a[9]];
      }
      for (int64_t n = 0; n < N; ++n) {
        row[n] *= alpha;
        if (has_c) row[n] += beta * C[bi * a[11] + m * a[12] + n * a[13]];
      }
    }
  }
}

void conv2d(const int64_t* a, float* const* addr, const Op& op) {
  int64_t N = a[0], C = a[1], H = a[2], W = a[3], OC = a[4], KH = a[5], KW = a[6], OH = a[7], OW = a[8];
  int64_t sh = a[9], sw = a[10], ph = a[11], pw = a[12], dh = a[13], dw = a[14], G = a[15];
  const float* x = addr[op.args[0]];
  const float* w = addr[op.args[1]];
  const float* bias = a[16] ? addr[op.args[2]] : nullptr;
  float* out = addr[op.args.back()];
  int64_t cg = C / G, ocg = OC / G;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t oc = 0; oc < OC; ++oc) {
      int64_t g = oc / ocg;
      float* o = out + (n * OC + oc) * OH * OW;
      std::fill(o, o + OH * OW, bias ? bias[oc] : 0.0f);
      for (int64_t ic = 0; ic < cg; ++ic) {
        const float* xi = x + (n * C + g * cg + ic) * H * W;
        const float* wk = w + (oc * cg + ic) * KH * KW;
        for (int64_t kh = 0; kh < KH; ++kh) {
          for (int64_t kw = 0; kw < KW; ++kw) {
            float wv = wk[kh * KW + kw];
            for (int64_t oh = 0; oh < OH; ++oh) {
              int64_t ih = oh * sh - ph + kh * dh;
              if (ih < 0 || ih >= H) continue;
              const float* xr = xi + ih * W;
              float* orow = o + oh * OW;
              for (int64_t ow = 0; ow < OW; ++ow) {
                int64_t iw = ow * sw - pw + kw * dw;
                if (iw >= 0 && iw < W) orow[ow] += wv * xr[iw];
              }
            }
          }
        }
      }
    }
  }
}

void pool2d(const int64_t* a, float* const* addr, const Op& op) {
  bool is_max = a[0] == 0;
  int64_t N = a[1], C = a[2], H = a[3], W = a[4], KH = a[5], KW = a[6], OH = a[7], OW = a[8];
  int64_t sh = a[9], sw = a[10], ph = a[11], pw = a[12];
  bool include_pad = a[13] != 0;
  const float* x = addr[op.args[0]];
  float* out = addr[op.args[1]];
  for (int64_t nc = 0; nc < N * C; ++nc) {
    const float* xi = x + nc * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        float acc = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
        int64_t count = 0;
        for (int64_t kh = 0; kh < KH; ++kh) {
          int64_t ih = oh * sh - ph + kh;
          for (int64_t kw = 0; kw < KW; ++kw) {
            int64_t iw = ow * sw - pw + kw;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) {
              count += include_pad;
              continue;
            }
            float v = xi[ih * W + iw];
            acc = is_max ? std::max(acc, v) : acc + v;
            ++count;
          }
        }
        out[(nc * OH + oh) * OW + ow] = is_max ? acc : acc / static_cast<float>(count ? count : 1);
      }
    }
  }
}

void reduce(const int64_t* a, float* const* addr, const Op& op) {
  int64_t kind = a[0], outer = a[1], R = a[2], inner = a[3];
  const float* x = addr[op.args[0]];
  float* out = addr[op.args[1]];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double acc = kind == 2 ? -std::numeric_limits<double>::infinity() : 0.0;
      for (int64_t r = 0; r < R; ++r) {
        double v = x[(o * R + r) * inner + i];
        acc = kind == 2 ? std::max(acc, v) : acc + v;
      }
      if (kind == 0) acc /= static_cast<double>(R ? R : 1);
      out[o * inner + i] = static_cast<float>(acc);
    }
  }
}

void softmax(const int64_t* a, float* const* addr, const Op& op) {
  int64_t outer = a[0], L = a[1], inner = a[2];
  const float* x = addr[op.args[0]];
  float* out = addr[op.args[1]];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const float* xs = x + o * L * inner + i;
      float* os = out + o * L * inner + i;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t l = 0; l < L; ++l) m = std::max(m, xs[l * inner]);
      double sum = 0.0;
      for (int64_t l = 0; l < L; ++l) sum += (os[l * inner] = std::exp(xs[l * inner] - m));
      for (int64_t l = 0; l < L; ++l) os[l * inner] = static_cast<float>(os[l * inner] / sum);
    }
  }
}

void layer_norm(const int64_t* a, float* const* addr, const Op& op) {
  int64_t outer = a[0], inner = a[1];
  double eps = as_double(a[2]);
  size_t next = 1;
  const float* scale = a[3] ? addr[op.args[next++]] : nullptr;
  const float* bias = a[4] ? addr[op.args[next++]] : nullptr;
  const float* x = addr[op.args[0]];
  float* out = addr[op.args.back()];
  for (int64_t o = 0; o < outer; ++o) {
    const float* xr = x + o * inner;
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < inner; ++i) mean += xr[i];
    mean /= static_cast<double>(inner);
    for (int64_t i = 0; i < inner; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    double rstd = 1.0 / std::sqrt(var / static_cast<double>(inner) + eps);
    for (int64_t i = 0; i < inner; ++i) {
      float v = static_cast<float>((xr[i] - mean) * rstd);
      if (scale) v *= scale[i];
      if (bias) v += bias[i];
      out[o * inner + i] = v;
    }
  }
}

void concat(const int64_t* a, float* const* addr, const Op& op) {
  int64_t outer = a[0], n = a[1], total = 0;
  for (int64_t i = 0; i < n; ++i) total += a[2 + i];
  float* out = addr[op.args.back()];
  for (int64_t o = 0; o < outer; ++o) {
    float* dst = out + o * total;
    for (int64_t i = 0; i < n; ++i) {
      int64_t chunk = a[2 + i];
      std::memcpy(dst, addr[op.args[i]] + o * chunk, sizeof(float) * chunk);
      dst += chunk;
    }
  }
}

std::string bad(const Op& op, const std::string& what) {
  return "op code " + std::to_string(static_cast<uint32_t>(op.code)) + ": " + what;
}

}  // namespace

std::string check_op(const Plan& p, const Op& op) {
  Arity ar = arity(op.code);
  if (ar.max_args < 0) return bad(op, "unknown op code");
  size_t nargs = op.args.size();
  if (nargs < static_cast<size_t>(ar.min_args) || nargs > static_cast<size_t>(ar.max_args)) {
    return bad(op, std::to_string(nargs) + " buffers, expected " + std::to_string(ar.min_args) + ".." +
                       std::to_string(ar.max_args));
  }
  for (uint32_t b : op.args) {
    if (b >= p.buffers.size()) return bad(op, "buffer id " + std::to_string(b) + " out of range");
  }
  const Buffer& outb = p.buffers[op.args.back()];
  if (outb.kind == Kind::kInput || outb.kind == Kind::kConstant) return bad(op, "writes an input or constant");
  const int64_t* a = op.attrs.data();
  size_t na = op.attrs.size();
  auto size_of = [&](size_t i) { return p.buffers[op.args[i]].numel(); };
  auto need = [&](size_t attrs) { return na >= attrs; };
  auto fits = [&](size_t i, int64_t elems) { return elems >= 0 && elems <= size_of(i); };
  if (ar.attrs >= 0 && na != static_cast<size_t>(ar.attrs)) {
    return bad(op, std::to_string(na) + " attributes, expected " + std::to_string(ar.attrs));
  }
  for (size_t i = 0; i < na; ++i) {
    // Float attributes excepted (gemm alpha/beta, layer-norm eps), every attr is a size,
    // a stride or a flag: none may be negative.
    bool is_float = (op.code == Code::kGemm && i >= 14) || (op.code == Code::kLayerNorm && i == 2);
    if (!is_float && a[i] < 0) return bad(op, "negative attribute " + std::to_string(i));
  }
  switch (op.code) {
    case Code::kUnary:
      if (a[0] > static_cast<int64_t>(UnaryFn::kLog)) return bad(op, "unknown unary function");
      if (size_of(0) != size_of(1)) return bad(op, "input and output sizes differ");
      return "";
    case Code::kBinary: {
      if (!need(2) || a[1] > kMaxDims || na != static_cast<size_t>(2 + 3 * a[1])) return bad(op, "bad attributes");
      if (a[0] > static_cast<int64_t>(BinaryFn::kPow)) return bad(op, "unknown binary function");
      int nd = static_cast<int>(a[1]);
      const int64_t* shape = a + 2;
      int64_t n = 1;
      for (int i = 0; i < nd; ++i) n *= shape[i];
      if (n != size_of(2)) return bad(op, "output shape does not match the output buffer");
      if (!fits(0, extent(shape, a + 2 + nd, nd)) || !fits(1, extent(shape, a + 2 + 2 * nd, nd))) {
        return bad(op, "an operand's strides reach past its buffer");
      }
      return "";
    }
    case Code::kGemm: {
      int64_t B = a[0], M = a[1], N = a[2], K = a[3];
      bool has_c = a[10] != 0;
      if (nargs != (has_c ? 4u : 3u)) return bad(op, "gemm buffer count does not match has_c");
      int64_t sa[3] = {B, M, K}, sta[3] = {a[4], a[5], a[6]};
      int64_t sb[3] = {B, K, N}, stb[3] = {a[7], a[8], a[9]};
      int64_t sc[3] = {B, M, N}, stc[3] = {a[11], a[12], a[13]};
      if (!fits(0, extent(sa, sta, 3)) || !fits(1, extent(sb, stb, 3)) ||
          (has_c && !fits(2, extent(sc, stc, 3))) || B * M * N != size_of(nargs - 1)) {
        return bad(op, "gemm sizes do not match its buffers");
      }
      return "";
    }
    case Code::kConv2d: {
      int64_t N = a[0], C = a[1], H = a[2], W = a[3], OC = a[4], KH = a[5], KW = a[6], OH = a[7], OW = a[8];
      int64_t G = a[15];
      if (G == 0 || C % G || OC % G || a[9] == 0 || a[10] == 0) return bad(op, "bad groups or strides");
      if (nargs != (a[16] ? 4u : 3u)) return bad(op, "conv buffer count does not match has_bias");
      if (N * C * H * W != size_of(0) || OC * (C / G) * KH * KW != size_of(1) ||
          (a[16] && OC != size_of(2)) || N * OC * OH * OW != size_of(nargs - 1)) {
        return bad(op, "conv sizes do not match its buffers");
      }
      return "";
    }
    case Code::kPool2d:
      if (a[1] * a[2] * a[3] * a[4] != size_of(0) || a[1] * a[2] * a[7] * a[8] != size_of(1) ||
          a[9] == 0 || a[10] == 0) {
        return bad(op, "pool sizes do not match its buffers");
      }
      return "";
    case Code::kReduce:
      if (a[0] > 2 || a[1] * a[2] * a[3] != size_of(0) || a[1] * a[3] != size_of(1)) {
        return bad(op, "reduce sizes do not match its buffers");
      }
      return "";
    case Code::kSoftmax:
      if (a[0] * a[1] * a[2] != size_of(0) || size_of(0) != size_of(1)) return bad(op, "softmax sizes");
      return "";
    case Code::kLayerNorm: {
      size_t expect = 2 + (a[3] != 0) + (a[4] != 0);
      if (nargs != expect || a[0] * a[1] != size_of(0) || size_of(0) != size_of(nargs - 1) || a[1] == 0) {
        return bad(op, "layer-norm sizes do not match its buffers");
      }
      for (size_t i = 1; i + 1 < nargs; ++i) {
        if (size_of(i) != a[1]) return bad(op, "layer-norm scale or bias size");
      }
      return "";
    }
    case Code::kStrided: {
      if (!need(1) || a[0] > kMaxDims || na != static_cast<size_t>(2 + 2 * a[0])) return bad(op, "bad attributes");
      int nd = static_cast<int>(a[0]);
      int64_t n = 1;
      for (int i = 0; i < nd; ++i) n *= a[1 + i];
      if (n != size_of(1) || !fits(0, extent(a + 1, a + 1 + nd, nd, a[1 + 2 * nd]))) {
        return bad(op, "strided copy sizes do not match its buffers");
      }
      return "";
    }
    case Code::kConcat: {
      if (!need(2) || na != static_cast<size_t>(2 + a[1]) || nargs != static_cast<size_t>(a[1] + 1)) {
        return bad(op, "bad attributes");
      }
      int64_t total = 0;
      for (int64_t i = 0; i < a[1]; ++i) {
        if (a[0] * a[2 + i] != size_of(i)) return bad(op, "concat input size");
        total += a[2 + i];
      }
      if (a[0] * total != size_of(nargs - 1)) return bad(op, "concat output size");
      return "";
    }
  }
  return bad(op, "unknown op code");
}

void run_op(const Plan& p, const Op& op, float* const* addr) {
  const int64_t* a = op.attrs.data();
  switch (op.code) {
    case Code::kUnary: {
      const float* x = addr[op.args[0]];
      float* out = addr[op.args[1]];
      UnaryFn fn = static_cast<UnaryFn>(a[0]);
      int64_t n = p.buffers[op.args[1]].numel();
      for (int64_t i = 0; i < n; ++i) out[i] = unary(fn, x[i]);
      return;
    }
    case Code::kBinary: {
      int nd = static_cast<int>(a[1]);
      const float* x = addr[op.args[0]];
      const float* y = addr[op.args[1]];
      float* out = addr[op.args[2]];
      BinaryFn fn = static_cast<BinaryFn>(a[0]);
      for_each_index(nd, a + 2, a + 2 + nd, a + 2 + 2 * nd,
                     [&](int64_t k, int64_t oa, int64_t ob) { out[k] = binary(fn, x[oa], y[ob]); });
      return;
    }
    case Code::kGemm: return gemm(a, addr, op);
    case Code::kConv2d: return conv2d(a, addr, op);
    case Code::kPool2d: return pool2d(a, addr, op);
    case Code::kReduce: return reduce(a, addr, op);
    case Code::kSoftmax: return softmax(a, addr, op);
    case Code::kLayerNorm: return layer_norm(a, addr, op);
    case Code::kStrided: {
      int nd = static_cast<int>(a[0]);
      const float* x = addr[op.args[0]] + a[1 + 2 * nd];
      float* out = addr[op.args[1]];
      for_each_index(nd, a + 1, a + 1 + nd, nullptr, [&](int64_t k, int64_t oa, int64_t) { out[k] = x[oa]; });
      return;
    }
    case Code::kConcat: return concat(a, addr, op);
  }
}

}  // namespace plan
}  // namespace flagos_sim

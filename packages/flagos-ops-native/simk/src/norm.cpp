// simk: layer normalization, forward and backward, over the trailing elements of each row.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common.hpp"

namespace {

using namespace simk;

int32_t check_rows(const simkTensor* input, int64_t n, const simkTensor* weight,
                   const simkTensor* bias, int64_t* rows) {
  if (int32_t st = check_float(input, "input", -1)) return st;
  if (!contiguous(*input)) return unsupported("input is not contiguous");
  for (const simkTensor* t : {weight, bias}) {
    if (!t) continue;
    if (int32_t st = check_float(t, "weight/bias", input->dtype)) return st;
    if (!contiguous(*t) || numel(*t) != n) return unsupported("weight/bias is not a contiguous [normalized_shape]");
  }
  int64_t total = numel(*input);
  if (n <= 0 || total % n) return fail(FLAGOS_NATIVE_INVALID, "normalized_numel does not divide the input");
  *rows = total / n;
  return FLAGOS_NATIVE_SUCCESS;
}

int32_t check_out(const simkTensor* t, const char* what, int64_t count) {
  if (int32_t st = check_float(t, what, -1)) return st;
  if (!contiguous(*t) || numel(*t) != count) return fail(FLAGOS_NATIVE_INVALID, std::string(what) + " has the wrong size");
  return FLAGOS_NATIVE_SUCCESS;
}

}  // namespace

extern "C" SIMK_API int32_t simkLayerNormGetWorkspaceSize(
    const simkTensor* input, int64_t n, const simkTensor* weight, const simkTensor* bias,
    double eps, const simkTensor* out, const simkTensor* mean, const simkTensor* rstd,
    uint64_t* ws, simkExecutor** ex) {
  int64_t rows = 0;
  if (int32_t st = check_rows(input, n, weight, bias, &rows)) return st;
  if (int32_t st = check_out(out, "out", rows * n)) return st;
  if (int32_t st = check_out(mean, "mean", rows)) return st;
  if (int32_t st = check_out(rstd, "rstd", rows)) return st;
  simkTensor x = *input, o = *out, mu = *mean, rs = *rstd, w{}, b{};
  bool has_w = weight, has_b = bias;
  if (has_w) w = *weight;
  if (has_b) b = *bias;
  return plan([=](void*) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0, ss = 0;
      for (int64_t i = 0; i < n; ++i) s += load(x.data, x.dtype, r * n + i);
      double m = s / double(n);
      for (int64_t i = 0; i < n; ++i) {
        double d = load(x.data, x.dtype, r * n + i) - m;
        ss += d * d;
      }
      double inv = 1.0 / std::sqrt(ss / double(n) + eps);
      store(mu.data, mu.dtype, r, float(m));
      store(rs.data, rs.dtype, r, float(inv));
      for (int64_t i = 0; i < n; ++i) {
        float v = float((load(x.data, x.dtype, r * n + i) - m) * inv);
        if (has_w) v *= load(w.data, w.dtype, i);
        if (has_b) v += load(b.data, b.dtype, i);
        store(o.data, o.dtype, r * n + i, v);
      }
    }
  }, ws, ex);
}
SIMK_DEFINE_EXECUTE(simkLayerNorm)

extern "C" SIMK_API int32_t simkLayerNormBackwardGetWorkspaceSize(
    const simkTensor* grad_out, const simkTensor* input, int64_t n, const simkTensor* mean,
    const simkTensor* rstd, const simkTensor* weight, const simkTensor* grad_input,
    const simkTensor* grad_weight, const simkTensor* grad_bias, uint64_t* ws, simkExecutor** ex) {
  int64_t rows = 0;
  if (int32_t st = check_rows(input, n, weight, nullptr, &rows)) return st;
  if (int32_t st = check_out(grad_out, "grad_out", rows * n)) return st;
  if (int32_t st = check_out(mean, "mean", rows)) return st;
  if (int32_t st = check_out(rstd, "rstd", rows)) return st;
  if (grad_input) if (int32_t st = check_out(grad_input, "grad_input", rows * n)) return st;
  if (grad_weight) if (int32_t st = check_out(grad_weight, "grad_weight", n)) return st;
  if (grad_bias) if (int32_t st = check_out(grad_bias, "grad_bias", n)) return st;
  simkTensor g = *grad_out, x = *input, mu = *mean, rs = *rstd, w{}, gi{}, gw{}, gb{};
  bool has_w = weight, want_gi = grad_input, want_gw = grad_weight, want_gb = grad_bias;
  if (has_w) w = *weight;
  if (want_gi) gi = *grad_input;
  if (want_gw) gw = *grad_weight;
  if (want_gb) gb = *grad_bias;
  // Workspace: the per-column sums of grad_weight and grad_bias, in double.
  return plan([=](void* workspace) {
    auto* acc_w = static_cast<double*>(workspace);
    double* acc_b = acc_w + n;
    std::fill(acc_w, acc_w + 2 * n, 0.0);
    // grad_input as torch's CPU kernel computes it, in float (its rounding matters where
    // x - mean cancels: a row of one element has a zero gradient made of rounding noise):
    // dx = rstd * dy * w + b * x + c with b = (db * mean - ds) * rstd^3 / n,
    // c = -b * mean - db * rstd / n, ds = sum(dy * w * x), db = sum(dy * w).
    const float scale = 1.0f / float(n);
    for (int64_t r = 0; r < rows; ++r) {
      float m = load(mu.data, mu.dtype, r), a = load(rs.data, rs.dtype, r);
      float ds = 0, db = 0;
      for (int64_t i = 0; i < n; ++i) {
        float dy = load(g.data, g.dtype, r * n + i), x_i = load(x.data, x.dtype, r * n + i);
        acc_w[i] += double(dy) * (double(x_i) - m) * a;
        acc_b[i] += dy;
        float dyw = dy * (has_w ? load(w.data, w.dtype, i) : 1.0f);
        ds += dyw * x_i;
        db += dyw;
      }
      if (!want_gi) continue;
      float b = (db * m - ds) * a * a * a * scale;
      float c = -b * m - db * a * scale;
      for (int64_t i = 0; i < n; ++i) {
        float dyw = load(g.data, g.dtype, r * n + i) * (has_w ? load(w.data, w.dtype, i) : 1.0f);
        store(gi.data, gi.dtype, r * n + i, a * dyw + b * load(x.data, x.dtype, r * n + i) + c);
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      if (want_gw) store(gw.data, gw.dtype, i, float(acc_w[i]));
      if (want_gb) store(gb.data, gb.dtype, i, float(acc_b[i]));
    }
  }, ws, ex, uint64_t(2 * n) * sizeof(double));
}
SIMK_DEFINE_EXECUTE(simkLayerNormBackward)

// RMS normalization: out = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps), computed in
// float like torch's composite rms_norm (the sum of squares in double).
extern "C" SIMK_API int32_t simkRmsNormGetWorkspaceSize(const simkTensor* input, int64_t n,
                                                        const simkTensor* weight, double eps,
                                                        const simkTensor* out,
                                                        const simkTensor* rstd, uint64_t* ws,
                                                        simkExecutor** ex) {
  int64_t rows = 0;
  if (int32_t st = check_rows(input, n, weight, nullptr, &rows)) return st;
  if (int32_t st = check_out(out, "out", rows * n)) return st;
  if (int32_t st = check_out(rstd, "rstd", rows)) return st;
  simkTensor x = *input, o = *out, rs = *rstd, w{};
  bool has_w = weight;
  if (has_w) w = *weight;
  return plan([=](void*) {
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) {
        double v = load(x.data, x.dtype, r * n + i);
        ss += v * v;
      }
      float inv = 1.0f / std::sqrt(float(ss / double(n)) + float(eps));
      store(rs.data, rs.dtype, r, inv);
      for (int64_t i = 0; i < n; ++i) {
        float v = load(x.data, x.dtype, r * n + i) * inv;
        if (has_w) v *= load(w.data, w.dtype, i);
        store(o.data, o.dtype, r * n + i, v);
      }
    }
  }, ws, ex);
}
SIMK_DEFINE_EXECUTE(simkRmsNorm)

// Its gradient: with xh = x * rstd and dyw = dy * w,
// dx = rstd * (dyw - xh * mean(dyw * xh)), dw = sum over rows of dy * xh.
extern "C" SIMK_API int32_t simkRmsNormBackwardGetWorkspaceSize(
    const simkTensor* grad_out, const simkTensor* input, int64_t n, const simkTensor* rstd,
    const simkTensor* weight, const simkTensor* grad_input, const simkTensor* grad_weight,
    uint64_t* ws, simkExecutor** ex) {
  int64_t rows = 0;
  if (int32_t st = check_rows(input, n, weight, nullptr, &rows)) return st;
  if (int32_t st = check_out(grad_out, "grad_out", rows * n)) return st;
  if (int32_t st = check_out(rstd, "rstd", rows)) return st;
  if (grad_input) if (int32_t st = check_out(grad_input, "grad_input", rows * n)) return st;
  if (grad_weight) if (int32_t st = check_out(grad_weight, "grad_weight", n)) return st;
  simkTensor g = *grad_out, x = *input, rs = *rstd, w{}, gi{}, gw{};
  bool has_w = weight, want_gi = grad_input, want_gw = grad_weight;
  if (has_w) w = *weight;
  if (want_gi) gi = *grad_input;
  if (want_gw) gw = *grad_weight;
  // Workspace: the per-column sums of grad_weight, in double.
  return plan([=](void* workspace) {
    auto* acc_w = static_cast<double*>(workspace);
    std::fill(acc_w, acc_w + n, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      float a = load(rs.data, rs.dtype, r);
      double dot = 0;
      for (int64_t i = 0; i < n; ++i) {
        float dy = load(g.data, g.dtype, r * n + i), xh = load(x.data, x.dtype, r * n + i) * a;
        acc_w[i] += double(dy) * xh;
        dot += double(dy * (has_w ? load(w.data, w.dtype, i) : 1.0f)) * xh;
      }
      if (!want_gi) continue;
      float m = float(dot / double(n));
      for (int64_t i = 0; i < n; ++i) {
        float dyw = load(g.data, g.dtype, r * n + i) * (has_w ? load(w.data, w.dtype, i) : 1.0f);
        float xh = load(x.data, x.dtype, r * n + i) * a;
        store(gi.data, gi.dtype, r * n + i, a * (dyw - xh * m));
      }
    }
    if (want_gw) {
      for (int64_t i = 0; i < n; ++i) store(gw.data, gw.dtype, i, float(acc_w[i]));
    }
  }, ws, ex, uint64_t(n) * sizeof(double));
}
SIMK_DEFINE_EXECUTE(simkRmsNormBackward)

// simk: scaled dot-product attention, forward and backward, one score row at a time (the
// scores of a row live in a buffer, never the whole [Lq, Lk] matrix). Grouped-query
// attention reads key/value head h / (Hq / Hk) for query head h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common.hpp"

namespace {

using namespace simk;

struct Shape {
  int64_t b, hq, hk, lq, lk, e, ev;
};

inline int64_t at4(const simkTensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2] + i3 * t.strides[3];
}

int32_t check4(const simkTensor* t, const char* what, int32_t dtype) {
  if (int32_t st = check_float(t, what, dtype)) return st;
  if (t->ndim != 4) return unsupported(std::string(what) + " is not 4-D [B, H, L, E]");
  return FLAGOS_NATIVE_SUCCESS;
}

int32_t check_sizes(const simkTensor* t, const char* what, std::initializer_list<int64_t> sizes) {
  int d = 0;
  if (t->ndim != int32_t(sizes.size())) return fail(FLAGOS_NATIVE_INVALID, std::string(what) + " has the wrong rank");
  for (int64_t s : sizes) {
    if (t->sizes[d++] != s) return fail(FLAGOS_NATIVE_INVALID, std::string(what) + " has the wrong shape");
  }
  return FLAGOS_NATIVE_SUCCESS;
}

// Checks q, k, v and the mask; fills the shape.
int32_t check_qkv(const simkTensor* q, const simkTensor* k, const simkTensor* v,
                  const simkTensor* mask, Shape* s) {
  if (int32_t st = check4(q, "query", -1)) return st;
  if (int32_t st = check4(k, "key", q->dtype)) return st;
  if (int32_t st = check4(v, "value", q->dtype)) return st;
  *s = {q->sizes[0], q->sizes[1], k->sizes[1], q->sizes[2], k->sizes[2], q->sizes[3], v->sizes[3]};
  if (k->sizes[0] != s->b || v->sizes[0] != s->b || v->sizes[1] != s->hk ||
      v->sizes[2] != s->lk || k->sizes[3] != s->e)
    return fail(FLAGOS_NATIVE_INVALID, "query, key and value do not fit together");
  if (s->hk == 0 || s->hq % s->hk) return unsupported("query heads are not a multiple of key heads");
  if (mask) {
    if (mask->ndim != 4) return unsupported("mask is not broadcast to [B, Hq, Lq, Lk]");
    if (mask->dtype != FLAGOS_NATIVE_BOOL && mask->dtype != q->dtype)
      return unsupported("mask is neither bool nor of the query's dtype");
    if (int32_t st = check_sizes(mask, "mask", {s->b, s->hq, s->lq, s->lk})) return st;
  }
  return FLAGOS_NATIVE_SUCCESS;
}

// The scaled, masked scores of row (b, h, i) into `row`; returns their maximum.
float score_row(const simkTensor& q, const simkTensor& k, const simkTensor& m, bool has_mask,
                bool causal, float scale, const Shape& s, int64_t b, int64_t h, int64_t i,
                std::vector<float>& row) {
  const float inf = std::numeric_limits<float>::infinity();
  int64_t hk = h / (s.hq / s.hk);
  float best = -inf;
  for (int64_t j = 0; j < s.lk; ++j) {
    float v;
    if (causal && j > i) {
      v = -inf;
    } else {
      double dot = 0;
      for (int64_t e = 0; e < s.e; ++e)
        dot += double(load(q.data, q.dtype, at4(q, b, h, i, e))) * load(k.data, k.dtype, at4(k, b, hk, j, e));
      v = float(dot) * scale;
      if (has_mask) {
        int64_t off = at4(m, b, h, i, j);
        if (m.dtype == FLAGOS_NATIVE_BOOL) {
          if (!static_cast<const bool*>(m.data)[off]) v = -inf;
        } else {
          v += load(m.data, m.dtype, off);
        }
      }
    }
    row[size_t(j)] = v;
    best = std::max(best, v);
  }
  return best;
}

}  // namespace

extern "C" SIMK_API int32_t simkAttentionGetWorkspaceSize(
    const simkTensor* query, const simkTensor* key, const simkTensor* value, const simkTensor* mask,
    bool is_causal, double scale, const simkTensor* out, const simkTensor* lse, uint64_t* ws,
    simkExecutor** ex) {
  Shape s;
  if (int32_t st = check_qkv(query, key, value, mask, &s)) return st;
  if (int32_t st = check_float(out, "out", query->dtype)) return st;
  if (int32_t st = check_float(lse, "lse", FLAGOS_NATIVE_FLOAT32)) return st;
  if (int32_t st = check_sizes(out, "out", {s.b, s.hq, s.lq, s.ev})) return st;
  if (int32_t st = check_sizes(lse, "lse", {s.b, s.hq, s.lq})) return st;
  if (!contiguous(*out) || !contiguous(*lse)) return unsupported("out and lse must be contiguous");
  simkTensor q = *query, k = *key, v = *value, o = *out, l = *lse, m{};
  bool has_mask = mask;
  if (has_mask) m = *mask;
  return plan([=](void*) {
    std::vector<float> row(size_t(s.lk));
    std::vector<double> acc(size_t(s.ev));
    for (int64_t b = 0; b < s.b; ++b)
      for (int64_t h = 0; h < s.hq; ++h)
        for (int64_t i = 0; i < s.lq; ++i) {
          float best = score_row(q, k, m, has_mask, is_causal, float(scale), s, b, h, i, row);
          int64_t hk = h / (s.hq / s.hk), r = (b * s.hq + h) * s.lq + i;
          std::fill(acc.begin(), acc.end(), 0.0);
          double total = 0;
          if (best != -std::numeric_limits<float>::infinity()) {
            for (int64_t j = 0; j < s.lk; ++j) {
              double p = std::exp(double(row[size_t(j)]) - best);
              total += p;
              for (int64_t e = 0; e < s.ev; ++e) acc[size_t(e)] += p * load(v.data, v.dtype, at4(v, b, hk, j, e));
            }
          }
          // A row with every key masked out gives zeros (torch's safe softmax) and lse -inf.
          static_cast<float*>(l.data)[r] = total > 0 ? float(best + std::log(total))
                                                     : -std::numeric_limits<float>::infinity();
          for (int64_t e = 0; e < s.ev; ++e)
            store(o.data, o.dtype, r * s.ev + e, total > 0 ? float(acc[size_t(e)] / total) : 0.0f);
        }
  }, ws, ex);
}
SIMK_DEFINE_EXECUTE(simkAttention)

// With p = exp(s - lse): dv = p^T do, dp = do v^T, ds = p * (dp - rowsum(do * o)),
// dq = scale * ds k, dk = scale * ds^T q. Workspace: dk and dv accumulators in double.
extern "C" SIMK_API int32_t simkAttentionBackwardGetWorkspaceSize(
    const simkTensor* grad_out, const simkTensor* query, const simkTensor* key,
    const simkTensor* value, const simkTensor* mask, const simkTensor* out, const simkTensor* lse,
    bool is_causal, double scale, const simkTensor* grad_query, const simkTensor* grad_key,
    const simkTensor* grad_value, uint64_t* ws, simkExecutor** ex) {
  Shape s;
  if (int32_t st = check_qkv(query, key, value, mask, &s)) return st;
  if (int32_t st = check4(grad_out, "grad_out", query->dtype)) return st;
  if (int32_t st = check4(out, "out", query->dtype)) return st;
  if (int32_t st = check_float(lse, "lse", FLAGOS_NATIVE_FLOAT32)) return st;
  if (int32_t st = check_sizes(grad_out, "grad_out", {s.b, s.hq, s.lq, s.ev})) return st;
  if (int32_t st = check_sizes(out, "out", {s.b, s.hq, s.lq, s.ev})) return st;
  if (int32_t st = check_sizes(lse, "lse", {s.b, s.hq, s.lq})) return st;
  const simkTensor* grads[] = {grad_query, grad_key, grad_value};
  const Shape& z = s;
  const std::initializer_list<int64_t> want[] = {{z.b, z.hq, z.lq, z.e}, {z.b, z.hk, z.lk, z.e},
                                                 {z.b, z.hk, z.lk, z.ev}};
  for (int g = 0; g < 3; ++g) {
    if (!grads[g]) continue;
    if (int32_t st = check_float(grads[g], "gradient", query->dtype)) return st;
    if (int32_t st = check_sizes(grads[g], "gradient", want[g])) return st;
    if (!contiguous(*grads[g])) return unsupported("gradients must be contiguous");
  }
  simkTensor go = *grad_out, q = *query, k = *key, v = *value, o = *out, l = *lse, m{}, gq{}, gk{}, gv{};
  bool has_mask = mask, want_q = grad_query, want_k = grad_key, want_v = grad_value;
  if (has_mask) m = *mask;
  if (want_q) gq = *grad_query;
  if (want_k) gk = *grad_key;
  if (want_v) gv = *grad_value;
  int64_t nk = s.b * s.hk * s.lk * s.e, nv = s.b * s.hk * s.lk * s.ev;
  return plan([=](void* workspace) {
    auto* acc_k = static_cast<double*>(workspace);
    double* acc_v = acc_k + nk;
    std::fill(acc_k, acc_k + nk + nv, 0.0);
    std::vector<float> row(size_t(s.lk));
    std::vector<double> dq(size_t(s.e));
    for (int64_t b = 0; b < s.b; ++b)
      for (int64_t h = 0; h < s.hq; ++h)
        for (int64_t i = 0; i < s.lq; ++i) {
          int64_t hk = h / (s.hq / s.hk), r = (b * s.hq + h) * s.lq + i;
          float lse_i = static_cast<const float*>(l.data)[b * l.strides[0] + h * l.strides[1] + i * l.strides[2]];
          score_row(q, k, m, has_mask, is_causal, float(scale), s, b, h, i, row);
          double d = 0;
          for (int64_t e = 0; e < s.ev; ++e)
            d += double(load(go.data, go.dtype, at4(go, b, h, i, e))) * load(o.data, o.dtype, at4(o, b, h, i, e));
          std::fill(dq.begin(), dq.end(), 0.0);
          bool empty = lse_i == -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < s.lk && !empty; ++j) {
            double p = std::exp(double(row[size_t(j)]) - lse_i);
            if (p == 0) continue;
            double dp = 0;
            for (int64_t e = 0; e < s.ev; ++e) {
              double g = load(go.data, go.dtype, at4(go, b, h, i, e));
              dp += g * load(v.data, v.dtype, at4(v, b, hk, j, e));
              acc_v[((b * s.hk + hk) * s.lk + j) * s.ev + e] += p * g;
            }
            double ds = p * (dp - d) * scale;
            for (int64_t e = 0; e < s.e; ++e) {
              dq[size_t(e)] += ds * load(k.data, k.dtype, at4(k, b, hk, j, e));
              acc_k[((b * s.hk + hk) * s.lk + j) * s.e + e] += ds * load(q.data, q.dtype, at4(q, b, h, i, e));
            }
          }
          if (want_q)
            for (int64_t e = 0; e < s.e; ++e) store(gq.data, gq.dtype, r * s.e + e, float(dq[size_t(e)]));
        }
    if (want_k) for (int64_t x = 0; x < nk; ++x) store(gk.data, gk.dtype, x, float(acc_k[x]));
    if (want_v) for (int64_t x = 0; x < nv; ++x) store(gv.data, gv.dtype, x, float(acc_v[x]));
  }, ws, ex, uint64_t(nk + nv) * sizeof(double));
}
SIMK_DEFINE_EXECUTE(simkAttentionBackward)

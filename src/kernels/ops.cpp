#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu.h"

namespace dspark {

namespace {
bool use_avx2() {
  static const bool on = cpu_features().avx2 && cpu_features().fma;
  return on;
}
}  // namespace

void rmsnorm(const float* x, int64_t ldx, const float* weight, float* y, int64_t ldy, int rows, int dim,
             float eps) {
  if (use_avx2() && dim % 8 == 0) return detail::rmsnorm_avx2(x, ldx, weight, y, ldy, rows, dim, eps);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(xr[i]) * xr[i];
    float inv = 1.f / std::sqrt(float(ss / dim) + eps);
    for (int i = 0; i < dim; ++i) yr[i] = xr[i] * inv * weight[i];
  }
}

void rope(float* x, int64_t ldx, int rows, int n_heads, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  if (use_avx2() && half % 8 == 0)
    return detail::rope_avx2(x, ldx, rows, n_heads, head_dim, cos, sin);
  for (int r = 0; r < rows; ++r) {
    const float* c = cos + int64_t(r) * half;
    const float* s = sin + int64_t(r) * half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + r * ldx + int64_t(h) * head_dim;
      for (int i = 0; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

void to_bf16(const float* x, uint16_t* out, int n) {
  if (use_avx2()) return detail::to_bf16_avx2(x, out, n);
  convert_f32_to_bf16(x, out, size_t(n));
}

void add_bias(float* x, const float* bias, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += bias[i];
}

void silu_mul(const float* gate_up, int64_t ld_in, float* out, int64_t ld_out, int rows, int inter) {
  if (use_avx2()) return detail::silu_mul_avx2(gate_up, ld_in, out, ld_out, rows, inter);
  for (int r = 0; r < rows; ++r) {
    const float* g = gate_up + r * ld_in;
    const float* u = g + inter;
    float* o = out + r * ld_out;
    for (int i = 0; i < inter; ++i) o[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
  }
}

void embed_rows(const void* table, DType dtype, int dim, const int32_t* ids, int rows, float* out,
                int64_t ldo) {
  for (int r = 0; r < rows; ++r) {
    size_t off = size_t(ids[r]) * size_t(dim);
    if (dtype == DType::BF16) {
      const uint16_t* src = static_cast<const uint16_t*>(table) + off;
      for (int i = 0; i < dim; ++i) out[r * ldo + i] = bf16_to_f32(src[i]);
    } else {
      std::memcpy(out + r * ldo, static_cast<const float*>(table) + off, size_t(dim) * 4);
    }
  }
}

int argmax(const float* x, int n) {
  // x[0] NaN: the scalar rule below never moves off it; the AVX2 pass skips NaNs, so keep it scalar.
  if (use_avx2() && n >= 16 && !std::isnan(x[0])) return detail::argmax_avx2(x, n);
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

float max_value(const float* x, int n) {
  if (use_avx2()) return detail::max_value_avx2(x, n);
  float m = -INFINITY;
  for (int i = 0; i < n; ++i)
    if (x[i] > m) m = x[i];
  return m;
}

double exp_shifted(const float* x, int n, float shift, float scale, float* out) {
  if (use_avx2()) return detail::exp_shifted_avx2(x, n, shift, scale, out);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += (out[i] = std::exp((x[i] - shift) * scale));
  return sum;
}

double exp_sum(const float* x, int n, float shift) {
  if (use_avx2()) return detail::exp_sum_avx2(x, n, shift);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(x[i] - shift);
  return sum;
}

float max_value_and_count(const float* x, int n, float t, int* above) {
  if (use_avx2()) return detail::max_value_and_count_avx2(x, n, t, above);
  float m = -INFINITY;
  int count = 0;
  for (int i = 0; i < n; ++i) {
    if (x[i] > m) m = x[i];
    count += x[i] > t;
  }
  *above = count;
  return m;
}

int next_greater(const float* x, int n, int from, float t) {
  if (use_avx2()) return detail::next_greater_avx2(x, n, from, t);
  for (int i = from; i < n; ++i)
    if (x[i] > t) return i;
  return n;
}

double kept_sum(const float* x, int n, float floor) {
  if (use_avx2()) return detail::kept_sum_avx2(x, n, floor);
  double sum = 0;
  for (int i = 0; i < n; ++i)
    if (x[i] >= floor && x[i] != 0.f) sum += x[i];
  return sum;
}

void kept_scale(float* x, int n, float floor, float s) {
  if (use_avx2()) return detail::kept_scale_avx2(x, n, floor, s);
  for (int i = 0; i < n; ++i) x[i] = x[i] >= floor && x[i] != 0.f ? x[i] * s : 0.f;
}

double residual_mass(const float* p, const float* q, int32_t onehot, double scale, int n) {
  double sum = 0;
  if (use_avx2()) {
    sum = detail::residual_mass_avx2(p, q, scale, n);
  } else {
    for (int i = 0; i < n; ++i) sum += std::max(scale * p[i] - (q ? double(q[i]) : 0.0), 0.0);
  }
  if (!q && onehot >= 0 && onehot < n)  // that token's term is max(scale p - 1, 0), not max(scale p, 0)
    sum += std::max(scale * p[onehot] - 1.0, 0.0) - std::max(scale * p[onehot], 0.0);
  return std::max(sum, 0.0);
}

int residual_pick(const float* p, const float* q, int32_t onehot, double scale, int n, double target) {
  auto term = [&](int v) { return std::max(scale * p[v] - (q ? double(q[v]) : v == onehot ? 1.0 : 0.0), 0.0); };
  constexpr int kBlock = 256;
  double cum = 0;
  for (int b = 0; b < n; b += kBlock) {
    const int e = std::min(n, b + kBlock);
    const double m = residual_mass(p + b, q ? q + b : nullptr, onehot - b, scale, e - b);
    if (cum + m <= target) {
      cum += m;
      continue;
    }
    for (int v = b; v < e; ++v) {
      const double r = term(v);
      if (r <= 0) continue;
      cum += r;
      if (target < cum) return v;
    }
  }
  for (int v = n - 1; v >= 0; --v)
    if (term(v) > 0) return v;
  return -1;
}

}  // namespace dspark

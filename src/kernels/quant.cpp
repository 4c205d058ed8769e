#include "kernels/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace dspark {

namespace {

uint16_t u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

float half(const uint8_t* p) { return f16_to_f32(u16(p)); }

void dequant_q8_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 34, y += 32) {
    const float d = half(b);
    const auto* q = reinterpret_cast<const int8_t*>(b + 2);
    for (int j = 0; j < 32; ++j) y[j] = d * float(q[j]);
  }
}

void dequant_q4_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    const float d = half(b);
    const uint8_t* q = b + 2;
    for (int j = 0; j < 16; ++j) {
      y[j] = d * float((q[j] & 0xF) - 8);
      y[j + 16] = d * float((q[j] >> 4) - 8);
    }
  }
}

void dequant_q5_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 22, y += 32) {
    const float d = half(b);
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    const uint8_t* q = b + 6;
    for (int j = 0; j < 16; ++j) {
      const int lo = (q[j] & 0xF) | int(((qh >> j) & 1u) << 4);
      const int hi = (q[j] >> 4) | int(((qh >> (j + 16)) & 1u) << 4);
      y[j] = d * float(lo - 16);
      y[j + 16] = d * float(hi - 16);
    }
  }
}

// Q4_K's 6-bit scale and min of group j (0..7) from its 12 packed bytes.
void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void dequant_q4_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 144) {
    const float d = half(b), dmin = half(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    for (int g = 0; g < 8; g += 2, q += 32) {
      int sc, m;
      scale_min_k4(g, scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      scale_min_k4(g + 1, scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void dequant_q6_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 210) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = half(b + 208);
    for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is + 0]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

}  // namespace

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  const auto tr = ggml_type_traits(uint32_t(t));
  if (!tr || !tr->supported) fail("dequantize_row: ggml type ", uint32_t(t), " is not read by dspark");
  if (n % tr->block_elems != 0) fail("dequantize_row: ", n, " weights of ", tr->name, " (blocks of ", tr->block_elems, ")");
  const int64_t nb = n / tr->block_elems;
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::F16: convert_to_f32(DType::F16, src, dst, size_t(n)); return;
    case GgmlType::BF16: convert_to_f32(DType::BF16, src, dst, size_t(n)); return;
    case GgmlType::Q8_0: dequant_q8_0(b, dst, nb); return;
    case GgmlType::Q4_0: dequant_q4_0(b, dst, nb); return;
    case GgmlType::Q5_0: dequant_q5_0(b, dst, nb); return;
    case GgmlType::Q4_K: dequant_q4_k(b, dst, nb); return;
    case GgmlType::Q6_K: dequant_q6_k(b, dst, nb); return;
    default: fail("dequantize_row: ", tr->name, " is not read by dspark");
  }
}

// ---------------------------------------------------------------------------------------------
// Quantization (llama.cpp's reference rounding)

namespace {

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Round half to even, for |v| < 2^22 (the magic-number trick the reference uses).
int nearest_int(float v) {
  const float f = v + 12582912.f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}

void quant_q8_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 34) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    put_half(b, d);
    for (int j = 0; j < 32; ++j) b[2 + j] = uint8_t(int8_t(std::roundf(x[j] * id)));
  }
}

// Q4_0 and Q5_0: the value of largest magnitude maps to -2^(bits-1); Q5_0 keeps each weight's
// fifth bit in a u32 after the scale.
template <int kBits>
void quant_q4_0_q5_0(const float* x, uint8_t* b, int64_t nb) {
  constexpr int kHalf = 1 << (kBits - 1), kMax = 2 * kHalf - 1;
  constexpr int kBlockBytes = kBits == 5 ? 22 : 18, kQs = kBits == 5 ? 6 : 2;
  for (int64_t i = 0; i < nb; ++i, x += 32, b += kBlockBytes) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
    const float d = max / -float(kHalf);
    const float id = d != 0.f ? 1.f / d : 0.f;
    put_half(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const uint8_t lo = uint8_t(std::min(kMax, int(int8_t(x[j] * id + (float(kHalf) + 0.5f)))));
      const uint8_t hi = uint8_t(std::min(kMax, int(int8_t(x[j + 16] * id + (float(kHalf) + 0.5f)))));
      b[kQs + j] = uint8_t((lo & 0xF) | ((hi & 0xF) << 4));
      qh |= uint32_t((lo & 0x10) >> 4) << j;
      qh |= uint32_t((hi & 0x10) >> 4) << (j + 16);
    }
    if constexpr (kBits == 5) std::memcpy(b + 2, &qh, 4);
  }
}

// The scale and min (returned as -min in *neg_min) of n values x quantized to [0, nmax] with
// weights w: a first fit from the range, then nstep + 1 trial scales, each refined by weighted
// least squares; the pair with the least weighted squared error wins. L gets the levels.
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                    float rdelta, int nstep) {
  float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, uint8_t(0));
    *neg_min = -min;
    return 0.f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    const float diff = scale * float(L[i]) + min - x[i];
    best_error += w[i] * (diff * diff);
  }
  uint8_t aux[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      aux[i] = uint8_t(l);
      sum_l += w[i] * float(l);
      sum_l2 += w[i] * float(l) * float(l);
      sum_xl += w[i] * float(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * float(aux[i]) + this_min - x[i];
        cur_error += w[i] * (diff * diff);
      }
      if (cur_error < best_error) {
        std::copy(aux, aux + n, L);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

void quant_q4_k(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256, b += 144) {
    uint8_t L[256];
    float weights[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
      scales[j] = fit_scale_min(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], -1.f, 0.1f, 20);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t* sc = b + 4;
    std::memset(sc, 0, 12);
    for (int j = 0; j < 8; ++j) {
      const uint8_t ls = uint8_t(std::min(63, int(uint8_t(nearest_int(inv_scale * scales[j])))));
      const uint8_t lm = uint8_t(std::min(63, int(uint8_t(nearest_int(inv_min * mins[j])))));
      if (j < 4) {
        sc[j] = ls;
        sc[j + 4] = lm;
      } else {
        sc[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
        sc[j - 4] |= uint8_t((ls >> 4) << 6);
        sc[j] |= uint8_t((lm >> 4) << 6);
      }
    }
    put_half(b, max_scale / 63.f);
    put_half(b + 2, max_min / 63.f);
    const float d_all = half(b), dmin_all = half(b + 2);
    for (int j = 0; j < 8; ++j) {
      int s, m;
      scale_min_k4(j, sc, &s, &m);
      const float d = d_all * float(s);
      if (d == 0.f) continue;
      const float dm = dmin_all * float(m);
      for (int l = 0; l < 32; ++l)
        L[32 * j + l] = uint8_t(std::max(0, std::min(15, nearest_int((x[32 * j + l] + dm) / d))));
    }
    uint8_t* q = b + 16;
    for (int j = 0; j < 256; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
  }
}

// The scale of n values x quantized symmetrically to levels [-nmax, nmax - 1] (L gets level +
// nmax), weights x^2: the level of largest magnitude maps to -nmax, then 18 trial scales around
// it, each refined by weighted least squares; the one with the largest sum(w x l)^2 / sum(w l^2)
// wins (llama.cpp's fit for Q6_K's groups of 16).
float fit_scale_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax < 1e-15f) {
    std::fill(L, L + n, int8_t(0));
    return 0.f;
  }
  auto level = [&](float iscale, float v) { return std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * v))); };
  // The weighted sums of the levels at `iscale`, and, with `keep`, the levels into L.
  float sumlx, suml2;
  auto fit = [&](float iscale, bool keep) {
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale, x[i]);
      if (keep) L[i] = int8_t(l + nmax);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
  };
  fit(-float(nmax) / max, true);
  float scale = suml2 != 0.f ? sumlx / suml2 : 0.f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(float(nmax) + 0.1f * float(is)) / max;
    fit(iscale, false);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = int8_t(level(iscale, x[i]) + nmax);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void quant_q6_k(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256, b += 210) {
    int8_t L[256];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = fit_scale_symmetric(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs_scale) max_abs_scale = std::fabs(scales[ib]), max_scale = scales[ib];
    }
    std::memset(b, 0, 210);
    if (max_abs_scale < 1e-15f) continue;  // all zero: d = 0
    const float iscale = -128.f / max_scale;
    put_half(b + 208, 1 / iscale);
    auto* sc = reinterpret_cast<int8_t*>(b + 192);
    for (int ib = 0; ib < 16; ++ib) sc[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
    const float d_all = half(b + 208);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * float(sc[j]);
      if (d == 0.f) continue;
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = int8_t(std::max(-32, std::min(31, nearest_int(x[16 * j + ii] / d))) + 32);
    }
    uint8_t* ql = b;
    uint8_t* qh = b + 128;
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32)
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = uint8_t((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = uint8_t((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
  }
}

}  // namespace

bool can_quantize(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q5_0 || t == GgmlType::Q4_K ||
         t == GgmlType::Q6_K;
}

void quantize_row(GgmlType t, const float* x, void* dst, int64_t n) {
  if (!can_quantize(t)) fail("quantize_row: dspark does not write ", ggml_type_name(t));
  const auto tr = ggml_type_traits(uint32_t(t));
  if (n % tr->block_elems != 0) fail("quantize_row: ", n, " weights of ", tr->name, " (blocks of ", tr->block_elems, ")");
  auto* b = static_cast<uint8_t*>(dst);
  const int64_t nb = n / tr->block_elems;
  switch (t) {
    case GgmlType::Q8_0: quant_q8_0(x, b, nb); return;
    case GgmlType::Q4_0: quant_q4_0_q5_0<4>(x, b, nb); return;
    case GgmlType::Q5_0: quant_q4_0_q5_0<5>(x, b, nb); return;
    case GgmlType::Q6_K: quant_q6_k(x, b, nb); return;
    default: quant_q4_k(x, b, nb); return;
  }
}

}  // namespace dspark

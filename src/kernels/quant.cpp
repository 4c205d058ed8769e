#include "kernels/quant.h"

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

}  // namespace dspark

#include "core/dtype.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dspark {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E5M2: return "F8_E5M2";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view n) {
  if (n == "F32") return DType::F32;
  if (n == "BF16") return DType::BF16;
  if (n == "F16") return DType::F16;
  if (n == "F64") return DType::F64;
  if (n == "I64") return DType::I64;
  if (n == "I32") return DType::I32;
  if (n == "I16") return DType::I16;
  if (n == "I8") return DType::I8;
  if (n == "U8") return DType::U8;
  if (n == "BOOL") return DType::BOOL;
  return std::nullopt;
}

std::optional<DType> dtype_from_flag(std::string_view n) {
  if (n == "f32" || n == "float32" || n == "fp32") return DType::F32;
  if (n == "bf16" || n == "bfloat16") return DType::BF16;
  return std::nullopt;
}

bool is_fp8(DType t) { return t == DType::F8_E4M3 || t == DType::F8_E5M2; }

namespace {
struct Fp8Format {
  int man_bits, bias;
  uint8_t max_code;  // the largest finite magnitude's code
};
Fp8Format fp8_format(DType t) {
  if (t == DType::F8_E4M3) return {3, 7, 0x7e};
  if (t == DType::F8_E5M2) return {2, 15, 0x7b};
  fail("not an fp8 type: ", dtype_name(t));
}
}  // namespace

float fp8_to_f32(uint8_t v, DType t) {
  const Fp8Format f = fp8_format(t);
  const int e = (v & 0x7f) >> f.man_bits, m = v & ((1 << f.man_bits) - 1);
  const float mag = e == 0 ? std::ldexp(float(m), 1 - f.bias - f.man_bits)
                           : std::ldexp(float((1 << f.man_bits) + m), e - f.bias - f.man_bits);
  return v & 0x80 ? -mag : mag;
}

float fp8_max(DType t) { return fp8_to_f32(fp8_format(t).max_code, t); }

uint8_t f32_to_fp8(float x, DType t) {
  const Fp8Format f = fp8_format(t);
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint8_t sign = uint8_t((u >> 24) & 0x80);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0;  // NaN
  const int drop = 23 - f.man_bits;
  if (a < uint32_t(127 + 1 - f.bias) << 23) {  // below the smallest normal: steps of its ulp
    float fa;
    std::memcpy(&fa, &a, 4);
    const float steps = std::ldexp(1.f, f.man_bits + f.bias - 1);  // exact power of two
    return uint8_t(sign | int(std::nearbyint(fa * steps)));  // 2^man_bits: the smallest normal
  }
  // Round the f32 mantissa to man_bits, to nearest even (a carry moves the exponent up), then
  // rebias the exponent; saturate at the largest finite code.
  const uint32_t r = a + ((1u << (drop - 1)) - 1) + ((a >> drop) & 1u);
  const uint32_t code = (r >> drop) - (uint32_t(127 - f.bias) << f.man_bits);
  return uint8_t(sign | std::min<uint32_t>(code, f.max_code));
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        e++;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      u = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | mant << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  int32_t exp = int32_t((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffff;
  if (((u >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return uint16_t(sign);
    mant |= 0x800000;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return uint16_t(sign | half);
  }
  uint32_t h = sign | uint32_t(exp) << 10 | mant >> 13;
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return uint16_t(h);
}

void convert_to_f32(DType src_type, const void* src, float* dst, size_t n) {
  switch (src_type) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::BF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::F64: {
      auto* s = static_cast<const double*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = float(s[i]);
      return;
    }
    default:
      fail("cannot convert ", dtype_name(src_type), " to F32");
  }
}

void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

}  // namespace dspark

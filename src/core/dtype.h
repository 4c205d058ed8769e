// Element types of tensors on disk and in memory, and scalar conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace dspark {

// F8_E4M3 (OCP e4m3fn: bias 7, max 448, no infinities) and F8_E5M2 (bias 15, max 57344) are KV
// cache element types only (--kv-cache-dtype fp8_e4m3 / fp8_e5m2); checkpoints in them are refused.
enum class DType : uint8_t { F32, BF16, F16, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::BF16:
    case DType::F16:
    case DType::I16:
      return 2;
    case DType::I8:
    case DType::U8:
    case DType::BOOL:
    case DType::F8_E4M3:
    case DType::F8_E5M2:
      return 1;
  }
  return 0;
}
const char* dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...
std::optional<DType> dtype_from_name(std::string_view name);
// Parses the user-facing names "f32" / "bf16" (also "float32", "bfloat16").
std::optional<DType> dtype_from_flag(std::string_view name);

inline float bf16_to_f32(uint16_t v) {
  uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

bool is_fp8(DType t);
// The largest finite value of an fp8 type (448 or 57344).
float fp8_max(DType t);
// Round to nearest even, saturating at +-fp8_max (NaN becomes 0). t is F8_E4M3 or F8_E5M2.
uint8_t f32_to_fp8(float f, DType t);
float fp8_to_f32(uint8_t v, DType t);

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of src (any float dtype) to f32.
void convert_to_f32(DType src_type, const void* src, float* dst, size_t n);
// Converts n f32 values to bf16 (round to nearest even).
void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t n);

}  // namespace dspark

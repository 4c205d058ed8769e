// Quantized weight blocks of llama.cpp's ggml formats: dequantization (reference, scalar) of the
// types dspark reads from GGUF files. The block layouts are the published ones:
//   Q8_0  32 weights: f16 d, int8 q[32]                               w = d * q
//   Q4_0  32 weights: f16 d, 16 bytes of nibbles (low: 0-15, high: 16-31)   w = d * (q - 8)
//   Q5_0  32 weights: f16 d, u32 fifth bits, 16 bytes of nibbles      w = d * (q - 16)
//   Q4_K 256 weights: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for 8 groups of 32,
//                     128 bytes of nibbles                            w = d * sc * q - dmin * m
//   Q6_K 256 weights: 128 bytes low nibbles, 64 bytes of high 2 bits, int8 scales for 16 groups
//                     of 16, f16 d                                    w = d * sc * (q - 32)
#pragma once

#include <cstdint>

#include "core/gguf.h"

namespace dspark {

// Dequantizes n weights (a multiple of the type's block size) of type t at src into dst.
// Float types (F32, F16, BF16) are converted. Throws Error for a type dspark does not read.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace dspark

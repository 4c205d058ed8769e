// Quantized weight blocks of llama.cpp's ggml formats: dequantization (reference, scalar) of the
// types dspark reads from GGUF files, and quantization with llama.cpp's reference rounding (the
// formulas llama-quantize writes files with, without an importance matrix) for Q8_0, Q4_0, Q5_0,
// Q4_K and Q6_K. The block layouts are the published ones:
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

// Quantizes n weights (a multiple of the block size) of x into ggml_row_bytes(t, n) bytes at dst:
//   Q8_0: d = max|x| / 127, q = round(x / d);
//   Q4_0: d = (the value of largest magnitude) / -8, q = min(15, trunc(x / d + 8.5));
//   Q5_0: d = (the value of largest magnitude) / -16, q = min(31, trunc(x / d + 16.5));
//   Q4_K: per group of 32 a scale and a min fitted by weighted least squares over 21 trial
//         scales (weights sqrt(mean x^2) + |x|), both quantized to 6 bits against the block's
//         largest, then each weight rounded against the quantized pair.
//   Q6_K: per group of 16 a symmetric scale fitted by weighted least squares (weights x^2) over
//         19 trial scales, quantized to int8 against the block's largest (which maps to -128),
//         then each weight rounded to [-32, 31] against its quantized scale.
// Throws Error for another type.
void quantize_row(GgmlType t, const float* x, void* dst, int64_t n);
// Whether quantize_row() can write type t.
bool can_quantize(GgmlType t);

}  // namespace dspark

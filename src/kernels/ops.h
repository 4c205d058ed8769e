// Elementwise and row-wise operations of the transformer forward pass (f32 activations).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace dspark {

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for `rows` rows of `dim` values.
void rmsnorm(const float* x, int64_t ldx, const float* weight, float* y, int64_t ldy, int rows, int dim,
             float eps);

// Rotates `n_heads` heads of each row in place (HF rotate_half convention: pairs (i, i + hd/2)).
// cos/sin hold hd/2 values per row.
void rope(float* x, int64_t ldx, int rows, int n_heads, int head_dim, const float* cos, const float* sin);

// convert_f32_to_bf16 (core/dtype.h: round to nearest even) on 8 lanes where the CPU has AVX2.
void to_bf16(const float* x, uint16_t* out, int n);

// x[i] += bias[i] for i < n.
void add_bias(float* x, const float* bias, int64_t n);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]; gate_up rows are [gate | up].
void silu_mul(const float* gate_up, int64_t ld_in, float* out, int64_t ld_out, int rows, int inter);

// Copies embedding rows table[ids[r]] (bf16 or f32, row length dim) into out.
void embed_rows(const void* table, DType dtype, int dim, const int32_t* ids, int rows, float* out,
                int64_t ldo);

// Returns the index of the largest value (the first one on ties). NaNs after x[0] are skipped;
// a NaN x[0] is returned (index 0), as the plain loop `if (x[i] > x[best]) best = i` does.
int argmax(const float* x, int n);

// Softmax building blocks (sampling and verification run them on whole vocabulary rows).
// The largest non-NaN value of x (-inf when there is none).
float max_value(const float* x, int n);
// out[i] = exp((x[i] - shift) * scale); returns their sum, accumulated in double. With AVX2 the
// exponential is a polynomial with relative error about 2e-7 that gives exactly 0 below
// exp(-87.3) and exactly 1 at 0.
double exp_shifted(const float* x, int n, float shift, float scale, float* out);
// The sum of exp(x[i] - shift) in double, storing nothing: exp_shifted's sum (scale 1) from the
// same exponential, added in float over at most 8 terms before each double addition.
double exp_sum(const float* x, int n, float shift);
// max_value(x, n), and in *above the count of x[i] > t, in one pass.
float max_value_and_count(const float* x, int n, float t, int* above);
// The first i >= from with x[i] > t (NaNs never are); n when there is none.
int next_greater(const float* x, int n, int from, float t);
// The sum, in double, of the x[i] that are >= floor and not 0 (the tokens a cut keeps).
double kept_sum(const float* x, int n, float floor);
// x[i] = x[i] * s where x[i] is kept by the same rule, 0 elsewhere.
void kept_scale(float* x, int n, float floor, float s);
// sum_v max(scale * p[v] - q[v], 0), in double: the residual mass of rejection sampling.
// q == nullptr stands for a one-hot draft distribution on token `onehot` (-1: q = 0).
double residual_mass(const float* p, const float* q, int32_t onehot, double scale, int n);
// Inverse-CDF draw over the same terms r_v = max(scale * p[v] - q[v], 0): the first v whose
// running sum exceeds `target`; if rounding leaves the sum short, the last v with r_v > 0
// (-1 when there is none). Whole blocks are skipped by their vectorised sums.
int residual_pick(const float* p, const float* q, int32_t onehot, double scale, int n, double target);

namespace detail {
double residual_mass_avx2(const float* p, const float* q, double scale, int n);
float max_value_avx2(const float* x, int n);
double exp_shifted_avx2(const float* x, int n, float shift, float scale, float* out);
double exp_sum_avx2(const float* x, int n, float shift);
float max_value_and_count_avx2(const float* x, int n, float t, int* above);
int next_greater_avx2(const float* x, int n, int from, float t);
double kept_sum_avx2(const float* x, int n, float floor);
void kept_scale_avx2(float* x, int n, float floor, float s);
void rope_avx2(float* x, int64_t ldx, int rows, int n_heads, int head_dim, const float* cos,
               const float* sin);
void to_bf16_avx2(const float* x, uint16_t* out, int n);
void silu_mul_avx2(const float* gate_up, int64_t ld_in, float* out, int64_t ld_out, int rows, int inter);
int argmax_avx2(const float* x, int n);
void rmsnorm_avx2(const float* x, int64_t ldx, const float* weight, float* y, int64_t ldy, int rows,
                  int dim, float eps);
}  // namespace detail

}  // namespace dspark

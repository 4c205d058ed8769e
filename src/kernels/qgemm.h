// Matrix products with weights held in llama.cpp's quantized block formats (Q8_0, Q4_0, Q5_0,
// Q4_K, Q6_K), repacked at load time into 16-row panels whose codes feed integer dot-product
// instructions directly.
//
// Activations are quantized per call, per row, to int8 in blocks of 32 (scale max|x| / 127, round
// to nearest even), as llama.cpp does for its integer dot products. Each output is then
//   y[i, n] = sum over 32-blocks b, in order, of  float(isum_b) * (w_scale_b[n] * x_scale_b[i])
//             (- w_min_b[n] * x_scale_b[i] * xsum_b[i], Q4_K only)
// where isum_b is the exact integer dot product of the codes: one fused multiply-add per term, in
// the same order whatever m is and whatever backend runs it. A row's result therefore does not
// depend on how many rows the step has (batch invariance) and is bit-identical between the
// AVX512-VNNI, AVX2 and reference kernels.
//
// Panel layout: rows [16p, 16p+16) form panel p (rows past n have zero codes and scales). A panel
// is the matrix's superblocks in k order (32 weights for Q8_0 and Q4_0, 256 for the K-quants); each
// superblock holds its scales for the 16 rows, then its 32-weight tiles. A tile's codes are 8
// "slices" of 64 bytes, slice s holding k = 4s..4s+3 for the 16 rows (row r's four codes at bytes
// 4r..4r+3): the operand order of vpdpbusd.
//   Q8_0 (544 B):  f16 d[16]; tile: 8 slices of int8 codes.
//   Q4_0 (288 B):  f16 d[16]; tile: 4 x 64 bytes, byte j of vector v holding slice v's code in its
//                  low nibble and slice v+4's in its high nibble (codes 0..15, weight d * (q - 8)).
//   Q5_0 (352 B):  f16 d[16]; tile: nibbles as Q4_0, then 64 bytes whose byte j holds bit 4 of
//                  slice s's code j in its bit s (codes 0..31, weight d * (q - 16)).
//   Q4_K (2368 B): f16 d[16], f16 dmin[16], u8 sc[8][16], u8 m[8][16]; 8 tiles as Q4_0
//                  (weight d * sc_j * q - dmin * m_j for tile j).
//   Q6_K (3360 B): f16 d[16], int8 sc[16][16] (one per 16 weights); 8 tiles of 384 bytes: the low
//                  nibbles as Q4_0 (256 B), then 2 x 64 bytes of high bit pairs, vector c holding
//                  slice 4c+t's bits 4-5 in its bits 2t..2t+1 (codes 0..63, weight d * sc * (q - 32)).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/gguf.h"

namespace dspark {

constexpr int kQPanelRows = 16;

// Byte offsets inside one superblock of a panel (the layouts above): 32-weight tiles per
// superblock, bytes of scales before the first tile, bytes per tile; all zero for a type without
// a kernel. The kernels and the packing read these, so the layout has one definition.
struct QTileLayout {
  int tiles = 0;
  int header = 0;
  int tile = 0;
};
constexpr QTileLayout qgemm_layout(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return {1, 32, 512};
    case GgmlType::Q4_0: return {1, 32, 256};
    case GgmlType::Q5_0: return {1, 32, 320};
    case GgmlType::Q4_K: return {8, 320, 256};
    case GgmlType::Q6_K: return {8, 288, 384};
    default: return {};
  }
}

// Whether matrices of type t can be held quantized for the kernels below (Q8_0, Q4_0, Q5_0, Q4_K,
// Q6_K).
bool qgemm_supports(GgmlType t);
// Weights per superblock of type t (32 or 256): a matrix's k must be a multiple.
int64_t qgemm_superblock(GgmlType t);
// Bytes of one superblock for the 16 rows of a panel, and of a whole [n, k] matrix's panels.
size_t qgemm_superblock_bytes(GgmlType t);
size_t qgemm_matrix_bytes(GgmlType t, int64_t n, int64_t k);
// Repacks n ggml rows of k weights (ggml_row_bytes(t, k) bytes each, row r at rows + r * that)
// into the panel layout at dst (qgemm_matrix_bytes(t, n, k) bytes). Throws Error for an
// unsupported type or a k that is not a multiple of the superblock.
void qgemm_pack(GgmlType t, const uint8_t* rows, int64_t n, int64_t k, uint8_t* dst);
// Row r of a packed matrix, dequantized (exactly dequantize_row's values).
void qgemm_unpack_row(GgmlType t, const uint8_t* panels, int64_t k, int64_t r, float* out);
float qgemm_weight_at(GgmlType t, const uint8_t* panels, int64_t k, int64_t r, int64_t c);

// One activation block: 32 int8 codes of x / d, d, the codes' sum (and of the first 16) and d * sum.
struct QActBlock {
  int8_t q[32];
  float d;
  float dsum;
  int32_t sum;
  int32_t sum_lo;
  int32_t pad[2];
};
static_assert(sizeof(QActBlock) == 56);

// Quantizes rows [0, m) of x (k a multiple of 32, row stride ldx) into m * k/32 blocks.
void quantize_activations(const float* x, int m, int64_t ldx, int64_t k, QActBlock* out);

// Rows [row0, row0 + rows) of a quantized matrix, packed as above (a stacked matrix such as q, k
// and v may hold its parts in different types).
struct QuantPart {
  GgmlType type = GgmlType::Q8_0;
  int row0 = 0;
  int rows = 0;
  const uint8_t* data = nullptr;
};

// y[m, n] (+)= x[m, k] . W[n, k]^T for W given as parts (see gemm() in gemm.h, which calls this).
void qgemm(const float* x, int m, int64_t ldx, int64_t k, const QuantPart* parts, int nparts, float* y,
           int64_t ldy, bool accumulate);

// The kernel that runs on this CPU and gemm backend: "avx512vnni", "avx2" or "reference".
const char* qgemm_kernel_name();

namespace detail {
// y[i, 16p0 .. 16p1) (+)= products of panels [p0, p1) of a packed [n, k] matrix of type t with
// rows [0, m) of the quantized activations xq (k/32 blocks per row); y's row stride is ldy and only
// columns < n are written.
using QPanelsFn = void (*)(GgmlType t, const uint8_t* panels, int64_t n, int64_t k, int p0, int p1,
                           const QActBlock* xq, int m, float* y, int64_t ldy, bool accumulate);
void quantize_activations_reference(const float* x, int m, int64_t ldx, int64_t k, QActBlock* out);
void quantize_activations_avx2(const float* x, int m, int64_t ldx, int64_t k, QActBlock* out);
void qpanels_reference(GgmlType t, const uint8_t* panels, int64_t n, int64_t k, int p0, int p1,
                       const QActBlock* xq, int m, float* y, int64_t ldy, bool accumulate);
void qpanels_avx2(GgmlType t, const uint8_t* panels, int64_t n, int64_t k, int p0, int p1,
                  const QActBlock* xq, int m, float* y, int64_t ldy, bool accumulate);
void qpanels_avx512vnni(GgmlType t, const uint8_t* panels, int64_t n, int64_t k, int p0, int p1,
                        const QActBlock* xq, int m, float* y, int64_t ldy, bool accumulate);

// The SIMD kernels' passes of 2 or more rows ask, at each tile, for the panel's bytes this many
// tiles' bytes ahead (the superblock headers between make that a little under as many tiles): a
// pass busy multiplying 9 rows otherwise leaves the DRAM stream idle, and took the DRAM time of
// one row plus its compute time rather than the larger of the two (`gemm_bench
// BM_Q_*_GateUp8B/9`). The distance is counted in tiles because a tile takes the same multiplies
// in every type while its bytes differ (256 for Q4_0 and Q4_K, 512 for Q8_0): the bytes in flight
// that hide DRAM's latency grow with the bytes a multiply consumes.
//
// The 1-row passes over 4-bit and 5- and 6-bit codes ask for the bytes kQPrefetchBytes1 ahead:
// unpacking the codes takes about 25 instructions per 256 bytes (AVX-512; twice as many on AVX2),
// so the out-of-order window reaches only a few KiB ahead of the loads it waits on. On a 2-core
// Zen 5 EPYC, `dspark bench step --tokens 1` on the GGUF files of docs/performance.md, alternated,
// medians: qwen3-1.7b Q4_0 27.9 -> 26.1 ms and Q4_K_M 27.5 -> 24.4 ms (AVX-512, 6 pairs), 40.3 ->
// 35.7 and 43.2 -> 35.8 ms (`--gemm avx2`, 4 pairs); qwen3-8b Q4_K_M 109-132 -> 85-97 ms (3
// pairs). Q8_0's byte codes need no unpacking, and its AVX-512 1-row pass ran 8% slower with the
// prefetch, so it has none. On a Zen 4 EPYC a 2 KiB 1-row prefetch had made the AVX-512 passes
// 5-10% slower: not remeasured there.
constexpr int kQPrefetchTiles = 16;
constexpr int kQPrefetchBytes1 = 4096;
template <int TileBytes, int AheadBytes = (kQPrefetchTiles * TileBytes)>
inline void qgemm_prefetch_ahead(const uint8_t* tile) {
#pragma GCC unroll 16
  for (int off = 0; off < TileBytes; off += 64) __builtin_prefetch(tile + AheadBytes + off, 0, 3);
}
// What a pass of MR rows over type T asks for at each tile (above), for every SIMD kernel.
template <GgmlType T, int MR, int TileBytes>
inline void qgemm_prefetch_for(const uint8_t* tile) {
  if constexpr (MR >= 2)
    qgemm_prefetch_ahead<TileBytes>(tile);
  else if constexpr (T != GgmlType::Q8_0)
    qgemm_prefetch_ahead<TileBytes, kQPrefetchBytes1>(tile);
}
}  // namespace detail

}  // namespace dspark

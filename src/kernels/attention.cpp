#include "kernels/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/buffer.h"
#include "core/cpu.h"
#include "core/thread_pool.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"

namespace dspark {

namespace {

// Element idx of K or V (base); `scale`: its position's fp8 scale.
inline float kv_at(const PagedKvLayer& kv, const void* base, int64_t idx, float scale) {
  if (kv.dtype == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(base)[idx]);
  if (is_fp8(kv.dtype)) return fp8_to_f32(static_cast<const uint8_t*>(base)[idx], kv.dtype) * scale;
  return static_cast<const float*>(base)[idx];
}

inline float scale_at(const float* scales, const PagedKvLayer& kv, int32_t phys, int h, int off) {
  return scales ? scales[kv.scale_offset(h, phys) + off] : 1.f;
}

inline int64_t k_index(const PagedKvLayer& kv, int32_t phys, int h, int d, int off) {
  return kv.block_offset(h, phys) + int64_t(d) * kKvBlock + off;
}

inline int64_t v_index(const PagedKvLayer& kv, int32_t phys, int h, int off, int d) {
  return kv.block_offset(h, phys) + int64_t(off) * kv.head_dim + d;
}

}  // namespace

void kv_write(const PagedKvLayer& kv, const int32_t* block_table, int pos, const float* k_row,
              const float* v_row) {
  const int32_t phys = block_table[pos / kKvBlock];
  const int off = pos % kKvBlock;
  if (is_fp8(kv.dtype)) {
    const float top = fp8_max(kv.dtype);
    uint8_t* kb = static_cast<uint8_t*>(kv.k);
    uint8_t* vb = static_cast<uint8_t*>(kv.v);
    for (int h = 0; h < kv.n_kv_heads; ++h) {
      const float* kr = k_row + h * kv.head_dim;
      const float* vr = v_row + h * kv.head_dim;
      float ka = 0.f, va = 0.f;
      for (int d = 0; d < kv.head_dim; ++d) {
        ka = std::max(ka, std::fabs(kr[d]));
        va = std::max(va, std::fabs(vr[d]));
      }
      const float ks = ka > 0.f ? ka / top : 1.f, vs = va > 0.f ? va / top : 1.f;
      kv.k_scale[kv.scale_offset(h, phys) + off] = ks;
      kv.v_scale[kv.scale_offset(h, phys) + off] = vs;
      for (int d = 0; d < kv.head_dim; ++d) {
        kb[k_index(kv, phys, h, d, off)] = f32_to_fp8(kr[d] / ks, kv.dtype);
        vb[v_index(kv, phys, h, off, d)] = f32_to_fp8(vr[d] / vs, kv.dtype);
      }
    }
    return;
  }
  // A position's V is one contiguous run per head; its K one element per dimension, kKvBlock
  // apart (K is dimension-major within a block).
  const int hd = kv.head_dim;
  if (kv.dtype == DType::BF16) {
    uint16_t* kb = static_cast<uint16_t*>(kv.k);
    uint16_t* vb = static_cast<uint16_t*>(kv.v);
    thread_local std::vector<uint16_t> kbf;
    kbf.resize(size_t(kv.n_kv_heads) * size_t(hd));
    to_bf16(k_row, kbf.data(), kv.n_kv_heads * hd);
    for (int h = 0; h < kv.n_kv_heads; ++h) {
      to_bf16(v_row + h * hd, vb + v_index(kv, phys, h, off, 0), hd);
      uint16_t* kd = kb + k_index(kv, phys, h, 0, off);
      const uint16_t* kr = kbf.data() + h * hd;
      for (int d = 0; d < hd; ++d) kd[int64_t(d) * kKvBlock] = kr[d];
    }
    return;
  }
  float* kf = static_cast<float*>(kv.k);
  float* vf = static_cast<float*>(kv.v);
  for (int h = 0; h < kv.n_kv_heads; ++h) {
    std::memcpy(vf + v_index(kv, phys, h, off, 0), v_row + h * hd, size_t(hd) * sizeof(float));
    float* kd = kf + k_index(kv, phys, h, 0, off);
    const float* kr = k_row + h * hd;
    for (int d = 0; d < hd; ++d) kd[int64_t(d) * kKvBlock] = kr[d];
  }
}

namespace detail {

void finish_tile(const TileKeys& span, const float* o, const float* mx, const float* sum, int nq, int group, int kvh,
                 int hd, float* out, int64_t ldo) {
  if (span.partial) {
    std::copy(o, o + int64_t(nq) * hd, span.partial);
    std::copy(mx, mx + nq, span.partial + int64_t(nq) * hd);
    std::copy(sum, sum + nq, span.partial + int64_t(nq) * (hd + 1));
    return;
  }
  for (int qi = 0; qi < nq; ++qi) {
    float* dst = out + (qi / group) * ldo + int64_t(kvh * group + qi % group) * hd;
    const float inv = sum[qi] > 0.f ? 1.f / sum[qi] : 0.f;
    for (int d = 0; d < hd; ++d) dst[d] = o[qi * hd + d] * inv;
  }
}

void attention_reference(const PagedKvLayer& kv, const AttentionRows& rows, const float* q, int64_t ldq,
                         int n_heads, float scale, float* out, int64_t ldo) {
  const int hd = kv.head_dim, group = n_heads / kv.n_kv_heads;
  parallel_for(rows.n * n_heads, [&](int task) {
    const int r = task / n_heads, h = task % n_heads, kvh = h / group;
    const int n = rows.visible[r];
    const int32_t* table = rows.tables[r];
    const float* qh = q + r * ldq + int64_t(h) * hd;
    std::vector<float> s(size_t(std::max(n, 1)));
    const int st = rows.start ? std::clamp(rows.start[r], 0, n) : 0;
    float mx = -INFINITY;
    for (int j = st; j < n; ++j) {
      int32_t phys = table[j / kKvBlock];
      float acc = 0.f;
      const float ks = scale_at(kv.k_scale, kv, phys, kvh, j % kKvBlock);
      for (int d = 0; d < hd; ++d) acc += qh[d] * kv_at(kv, kv.k, k_index(kv, phys, kvh, d, j % kKvBlock), ks);
      s[j] = acc * scale;
      mx = std::max(mx, s[j]);
    }
    double sum = 0;
    for (int j = st; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
    float* o = out + r * ldo + int64_t(h) * hd;
    for (int d = 0; d < hd; ++d) o[d] = 0.f;
    for (int j = st; j < n; ++j) {
      int32_t phys = table[j / kKvBlock];
      float p = float(s[j] / sum);
      const float vs = scale_at(kv.v_scale, kv, phys, kvh, j % kKvBlock);
      for (int d = 0; d < hd; ++d) o[d] += p * kv_at(kv, kv.v, v_index(kv, phys, kvh, j % kKvBlock, d), vs);
    }
  });
}

}  // namespace detail

namespace {

bool avx512_attention() {
  const GemmBackend b = gemm_backend();  // read each call: tests switch to the AVX2 paths
  return cpu_features().avx512f && cpu_features().avx512bw && b != GemmBackend::Avx2 && b != GemmBackend::Reference;
}

std::atomic<bool> bf16_pairs_enabled{true};

// Whether a tile over a cache of `dtype` with this head dimension runs on bf16 pairs.
bool bf16_pairs(DType dtype, int head_dim) {
  return dtype == DType::BF16 && head_dim % 32 == 0 && cpu_features().avx512_bf16 &&
         bf16_pairs_enabled.load(std::memory_order_relaxed) && avx512_attention();
}

}  // namespace

void detail::set_attention_bf16_pairs(bool enabled) { bf16_pairs_enabled.store(enabled); }

const char* attention_kernel_name(DType dtype) {
  if (bf16_pairs(dtype, 32)) return "avx512bf16";
  if (avx512_attention()) return "avx512";
  return cpu_features().avx2 && cpu_features().fma ? "avx2" : "reference";
}

void attention(const PagedKvLayer& kv, const AttentionRows& rows, const float* q, int64_t ldq,
               int n_heads, float scale, float* out, int64_t ldo) {
  static const bool avx2 = cpu_features().avx2 && cpu_features().fma;
  static const bool f16c = cpu_features().f16c;  // the tiles widen fp8 through f16
  if (!avx2 || kv.head_dim % 8 != 0 || (is_fp8(kv.dtype) && !f16c))
    return detail::attention_reference(kv, rows, q, ldq, n_heads, scale, out, ldo);
  const bool wide = kv.head_dim % 16 == 0 && avx512_attention();
  const auto tile_fn = bf16_pairs(kv.dtype, kv.head_dim) ? detail::attention_tile_avx512bf16
                       : wide                            ? detail::attention_tile_avx512
                                                         : detail::attention_tile_avx2;
  // Tiles: runs of up to kTileRows consecutive rows that share a sequence, so each K/V block
  // read from memory serves every query row and GQA head of the tile: a verification of up to
  // 15 drafts (16 rows) reads its sequence's cache once.
  constexpr int kTileRows = 16;
  // Flash-decoding: a tile whose rows see more than kSplitKeys positions is split along the
  // sequence at the multiples of kSplitKeys, one task per part and KV head, so one long sequence
  // gives every thread work; the parts are then merged in order. The boundaries are fixed
  // positions, never a function of the thread count or of the other rows, so a row's result is
  // the same alone or batched (a part a row sees nothing of adds exactly zero, and a row that
  // sees one part gets exactly the unsplit result).
  constexpr int kSplitKeys = 2048;
  const int hd = kv.head_dim, group = n_heads / kv.n_kv_heads, nkv = kv.n_kv_heads;
  struct Tile {
    int r0, nr;
    int k0;           // the first key any row sees, rounded down to a KV block
    int first, parts;  // its parts: [first, first + parts) x kSplitKeys
    int64_t task0;    // its first task; the tile has parts x nkv
    int64_t partial;  // offset of its parts' results in `partials` (parts > 1)
  };
  // (thread_local storage must be read through a reference: workers have their own copies)
  thread_local std::vector<Tile> tiles_storage;
  thread_local std::vector<float> partials_storage;
  std::vector<Tile>& tiles = tiles_storage;
  std::vector<float>& partials = partials_storage;
  tiles.clear();
  int64_t tasks = 0, floats = 0;
  for (int r = 0; r < rows.n;) {
    int e = r + 1, max_vis = rows.visible[r], min_start = rows.start ? rows.start[r] : 0;
    while (e < rows.n && e - r < kTileRows && rows.tables[e] == rows.tables[r]) {
      max_vis = std::max(max_vis, rows.visible[e]);
      if (rows.start) min_start = std::min(min_start, rows.start[e]);
      ++e;
    }
    min_start = std::clamp(min_start, 0, std::max(0, max_vis - 1));
    const int first = min_start / kSplitKeys;
    const int parts = std::max(1, (max_vis + kSplitKeys - 1) / kSplitKeys - first);
    tiles.push_back({r, e - r, min_start / kKvBlock * kKvBlock, first, parts, tasks, floats});
    tasks += int64_t(parts) * nkv;
    if (parts > 1) floats += int64_t(parts) * nkv * (e - r) * group * (hd + 2);
    r = e;
  }
  if (partials.size() < size_t(floats)) partials.resize(size_t(floats));
  // A task's tile: the last one whose first task is at or before it.
  auto tile_of = [&](int64_t task) -> const Tile& {
    return *(std::upper_bound(tiles.begin(), tiles.end(), task,
                              [](int64_t t, const Tile& x) { return t < x.task0; }) -
             1);
  };
  parallel_for(int(tasks), [&](int task) {
    const Tile& t = tile_of(task);
    const int local = int(task - t.task0), kvh = local % nkv, part = local / nkv;
    const int nq = t.nr * group;
    detail::TileKeys span;
    span.k0 = t.k0;
    span.start = rows.start ? rows.start + t.r0 : nullptr;
    if (t.parts > 1) {
      span.k0 = std::max(t.k0, (t.first + part) * kSplitKeys);
      span.k1 = (t.first + part + 1) * kSplitKeys;
      span.partial = partials.data() + t.partial + int64_t(part * nkv + kvh) * nq * (hd + 2);
    }
    tile_fn(kv, rows.tables[t.r0], rows.visible + t.r0, t.nr, q + t.r0 * ldq, ldq, group, kvh, scale,
            out + t.r0 * ldo, ldo, span);
  });
  // The merge, part by part in order: out = sum_i o_i e^(m_i - M) / sum_i l_i e^(m_i - M).
  thread_local std::vector<int> split_storage;
  std::vector<int>& split = split_storage;
  split.clear();
  for (int i = 0; i < int(tiles.size()); ++i)
    if (tiles[size_t(i)].parts > 1) split.push_back(i);
  if (split.empty()) return;
  parallel_for(int(split.size()) * nkv, [&](int task) {
    const Tile& t = tiles[size_t(split[size_t(task / nkv)])];
    const int kvh = task % nkv, nq = t.nr * group;
    const int64_t stride = int64_t(nkv) * nq * (hd + 2);  // from one part to the next
    const float* p0 = partials.data() + t.partial + int64_t(kvh) * nq * (hd + 2);
    thread_local std::vector<float> acc_storage;
    std::vector<float>& acc = acc_storage;
    acc.resize(size_t(hd));
    for (int qi = 0; qi < nq; ++qi) {
      float m = -INFINITY;
      for (int i = 0; i < t.parts; ++i) m = std::max(m, p0[i * stride + nq * hd + qi]);
      float l = 0.f;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int i = 0; i < t.parts && m > -INFINITY; ++i) {
        const float* pi = p0 + i * stride;
        const float mi = pi[nq * hd + qi];
        if (mi == -INFINITY) continue;  // this row sees none of the part
        const float w = std::exp(mi - m);
        l += pi[nq * (hd + 1) + qi] * w;
        for (int d = 0; d < hd; ++d) acc[size_t(d)] += pi[qi * hd + d] * w;
      }
      const float inv = l > 0.f ? 1.f / l : 0.f;
      float* dst = out + (t.r0 + qi / group) * ldo + int64_t(kvh * group + qi % group) * hd;
      for (int d = 0; d < hd; ++d) dst[d] = acc[size_t(d)] * inv;
    }
  });
}

}  // namespace dspark

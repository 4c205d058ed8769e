#include "kernels/qgemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/buffer.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/gemm.h"

namespace dspark {

namespace {

bool vnni_available() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512vl && f.avx512_vnni && f.avx2 && f.fma && f.f16c;
}
bool avx2_available() {
  const CpuFeatures& f = cpu_features();
  return f.avx2 && f.fma && f.f16c;
}

// qgemm_layout(t), which must be one with a kernel.
QTileLayout layout(GgmlType t) {
  const QTileLayout L = qgemm_layout(t);
  if (L.tiles == 0) fail("internal: no quantized kernel for ", ggml_type_name(t));
  return L;
}

uint16_t u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
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

// The code of weight (r, c) inside tile `tile` (r in 0..15, c in 0..31).
int tile_code(GgmlType t, const uint8_t* tile, int r, int c) {
  const int s = c / 4, j = 4 * r + c % 4;
  if (t == GgmlType::Q8_0) return int8_t(tile[s * 64 + j]);
  const uint8_t nib = tile[(s % 4) * 64 + j];
  int q = s < 4 ? nib & 0xF : nib >> 4;
  if (t == GgmlType::Q5_0) q |= ((tile[256 + j] >> s) & 1) << 4;
  if (t == GgmlType::Q6_K) q |= ((tile[256 + (s / 4) * 64 + j] >> (2 * (s % 4))) & 3) << 4;
  return q;
}

void set_tile_code(GgmlType t, uint8_t* tile, int r, int c, int q) {
  const int s = c / 4, j = 4 * r + c % 4;
  if (t == GgmlType::Q8_0) {
    tile[s * 64 + j] = uint8_t(int8_t(q));
    return;
  }
  uint8_t& nib = tile[(s % 4) * 64 + j];
  nib = uint8_t(s < 4 ? (nib & 0xF0) | (q & 0xF) : (nib & 0x0F) | ((q & 0xF) << 4));
  if (t == GgmlType::Q5_0) tile[256 + j] |= uint8_t(((q >> 4) & 1) << s);
  if (t == GgmlType::Q6_K) tile[256 + (s / 4) * 64 + j] |= uint8_t(((q >> 4) & 3) << (2 * (s % 4)));
}

// Copies one ggml superblock of row r (src) into the panel superblock (dst, zeroed beforehand).
void pack_superblock(GgmlType t, const uint8_t* src, int r, uint8_t* dst) {
  const QTileLayout L = layout(t);
  auto put16 = [&](int off, uint16_t v) { std::memcpy(dst + off + 2 * r, &v, 2); };
  switch (t) {
    case GgmlType::Q8_0:
      put16(0, u16(src));
      for (int c = 0; c < 32; ++c) set_tile_code(t, dst + L.header, r, c, int8_t(src[2 + c]));
      return;
    case GgmlType::Q4_0:
      put16(0, u16(src));
      for (int c = 0; c < 16; ++c) {
        set_tile_code(t, dst + L.header, r, c, src[2 + c] & 0xF);
        set_tile_code(t, dst + L.header, r, c + 16, src[2 + c] >> 4);
      }
      return;
    case GgmlType::Q5_0: {
      put16(0, u16(src));
      uint32_t qh;
      std::memcpy(&qh, src + 2, 4);
      for (int c = 0; c < 16; ++c) {
        set_tile_code(t, dst + L.header, r, c, (src[6 + c] & 0xF) | int(((qh >> c) & 1u) << 4));
        set_tile_code(t, dst + L.header, r, c + 16, (src[6 + c] >> 4) | int(((qh >> (c + 16)) & 1u) << 4));
      }
      return;
    }
    case GgmlType::Q4_K: {
      put16(0, u16(src));
      put16(32, u16(src + 2));
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        scale_min_k4(j, src + 4, &sc, &m);
        dst[64 + 16 * j + r] = uint8_t(sc);
        dst[192 + 16 * j + r] = uint8_t(m);
      }
      const uint8_t* q = src + 16;
      for (int g = 0; g < 8; g += 2, q += 32)
        for (int l = 0; l < 32; ++l) {
          set_tile_code(t, dst + L.header + g * L.tile, r, l, q[l] & 0xF);
          set_tile_code(t, dst + L.header + (g + 1) * L.tile, r, l, q[l] >> 4);
        }
      return;
    }
    case GgmlType::Q6_K: {
      const uint8_t* ql = src;
      const uint8_t* qh = src + 128;
      put16(0, u16(src + 208));
      for (int g = 0; g < 16; ++g) dst[32 + 16 * g + r] = src[192 + g];
      for (int n = 0; n < 256; n += 128, ql += 64, qh += 32)
        for (int l = 0; l < 32; ++l) {
          const int q[4] = {(ql[l] & 0xF) | ((qh[l] & 3) << 4), (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4),
                            (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4), (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)};
          for (int i = 0; i < 4; ++i) {
            const int pos = n + 32 * i + l;
            set_tile_code(t, dst + L.header + (pos / 32) * L.tile, r, pos % 32, q[i]);
          }
        }
      return;
    }
    default: layout(t);
  }
}

// The weight scale (and Q4_K's min) that lane r's codes of tile `tile_i` of superblock `sb` carry;
// for Q6_K, `half` picks the sub-block of 16.
float tile_scale(GgmlType t, const uint8_t* sb, int tile_i, int half, int r) {
  const float d = f16_to_f32(u16(sb + 2 * r));
  if (t == GgmlType::Q4_K) return d * float(sb[64 + 16 * tile_i + r]);
  if (t == GgmlType::Q6_K) return d * float(int8_t(sb[32 + 16 * (2 * tile_i + half) + r]));
  return d;
}
float tile_min(const uint8_t* sb, int tile_i, int r) {
  return f16_to_f32(u16(sb + 32 + 2 * r)) * float(sb[192 + 16 * tile_i + r]);
}
int code_offset(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return 8;
    case GgmlType::Q5_0: return 16;
    case GgmlType::Q6_K: return 32;
    default: return 0;
  }
}

}  // namespace

bool qgemm_supports(GgmlType t) { return qgemm_layout(t).tiles > 0; }

int64_t qgemm_superblock(GgmlType t) { return layout(t).tiles * 32; }

size_t qgemm_superblock_bytes(GgmlType t) {
  const QTileLayout L = layout(t);
  return size_t(L.header + L.tiles * L.tile);
}

size_t qgemm_matrix_bytes(GgmlType t, int64_t n, int64_t k) {
  return size_t((n + kQPanelRows - 1) / kQPanelRows) * size_t(k / qgemm_superblock(t)) * qgemm_superblock_bytes(t);
}

void qgemm_pack(GgmlType t, const uint8_t* rows, int64_t n, int64_t k, uint8_t* dst) {
  if (!qgemm_supports(t)) fail("internal: no quantized kernel for ", ggml_type_name(t));
  const int64_t S = qgemm_superblock(t);
  if (k % S != 0) fail("internal: ", ggml_type_name(t), " rows of ", k, " weights are not whole superblocks of ", S);
  const int64_t nsb = k / S, panels = (n + kQPanelRows - 1) / kQPanelRows;
  const size_t sbb = qgemm_superblock_bytes(t), row_bytes = ggml_row_bytes(t, k), src_sb = row_bytes / size_t(nsb);
  parallel_for(int(panels), [&](int p) {
    uint8_t* panel = dst + size_t(p) * size_t(nsb) * sbb;
    std::memset(panel, 0, size_t(nsb) * sbb);
    for (int r = 0; r < kQPanelRows && int64_t(p) * kQPanelRows + r < n; ++r) {
      const uint8_t* src = rows + size_t(int64_t(p) * kQPanelRows + r) * row_bytes;
      for (int64_t b = 0; b < nsb; ++b) pack_superblock(t, src + size_t(b) * src_sb, r, panel + size_t(b) * sbb);
    }
  });
}

float qgemm_weight_at(GgmlType t, const uint8_t* panels, int64_t k, int64_t r, int64_t c) {
  const QTileLayout L = layout(t);
  const int64_t S = L.tiles * 32, nsb = k / S;
  const size_t sbb = qgemm_superblock_bytes(t);
  const uint8_t* sb = panels + size_t((r / kQPanelRows) * nsb + c / S) * sbb;
  const int lane = int(r % kQPanelRows), ti = int((c % S) / 32), cc = int(c % 32);
  const int q = tile_code(t, sb + L.header + ti * L.tile, lane, cc);
  const float scale = tile_scale(t, sb, ti, cc / 16, lane);
  if (t == GgmlType::Q4_K) return scale * float(q) - tile_min(sb, ti, lane);
  return scale * float(q - code_offset(t));
}

void qgemm_unpack_row(GgmlType t, const uint8_t* panels, int64_t k, int64_t r, float* out) {
  for (int64_t c = 0; c < k; ++c) out[c] = qgemm_weight_at(t, panels, k, r, c);
}

void quantize_activations(const float* x, int m, int64_t ldx, int64_t k, QActBlock* out) {
  static const bool simd = avx2_available();
  if (simd) return detail::quantize_activations_avx2(x, m, ldx, k, out);
  detail::quantize_activations_reference(x, m, ldx, k, out);
}

void detail::quantize_activations_reference(const float* x, int m, int64_t ldx, int64_t k, QActBlock* out) {
  const int64_t nb = k / 32;
  for (int i = 0; i < m; ++i) {
    const float* xr = x + int64_t(i) * ldx;
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = xr + 32 * b;
      QActBlock& o = out[int64_t(i) * nb + b];
      float amax = 0.f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.f, id = d > 0.f ? 1.f / d : 0.f;
      int sum = 0, sum_lo = 0;
      for (int j = 0; j < 32; ++j) {
        const int q = int(std::clamp(std::nearbyint(v[j] * id), -127.f, 127.f));
        o.q[j] = int8_t(q);
        sum += q;
        if (j < 16) sum_lo += q;
      }
      o.d = d;
      o.sum = sum;
      o.sum_lo = sum_lo;
      o.dsum = d * float(sum);
      o.pad[0] = o.pad[1] = 0;
    }
  }
}

namespace detail {

void qpanels_reference(GgmlType t, const uint8_t* panels, int64_t n, int64_t k, int p0, int p1, const QActBlock* xq,
                       int m, float* y, int64_t ldy, bool accumulate) {
  const QTileLayout L = layout(t);
  const int64_t nsb = k / (L.tiles * 32), nb = k / 32;
  const size_t sbb = qgemm_superblock_bytes(t);
  const int off = code_offset(t);
  for (int p = p0; p < p1; ++p) {
    const uint8_t* panel = panels + size_t(p) * size_t(nsb) * sbb;
    const int lanes = int(std::min<int64_t>(kQPanelRows, n - int64_t(p) * kQPanelRows));
    for (int i = 0; i < m; ++i)
      for (int r = 0; r < lanes; ++r) {
        float* out = y + int64_t(i) * ldy + int64_t(p) * kQPanelRows + r;
        float tot = accumulate ? *out : 0.f;
        for (int64_t s = 0; s < nsb; ++s) {
          const uint8_t* sb = panel + size_t(s) * sbb;
          for (int ti = 0; ti < L.tiles; ++ti) {
            const QActBlock& a = xq[int64_t(i) * nb + s * L.tiles + ti];
            const uint8_t* tile = sb + L.header + ti * L.tile;
            int32_t acc[2] = {0, 0};
            for (int c = 0; c < 32; ++c) acc[c / 16] += tile_code(t, tile, r, c) * int32_t(a.q[c]);
            if (t == GgmlType::Q6_K) {
              acc[0] -= off * a.sum_lo;
              acc[1] -= off * (a.sum - a.sum_lo);
              tot = std::fma(float(acc[0]), tile_scale(t, sb, ti, 0, r) * a.d, tot);
              tot = std::fma(float(acc[1]), tile_scale(t, sb, ti, 1, r) * a.d, tot);
              continue;
            }
            const int32_t isum = acc[0] + acc[1] - off * a.sum;
            tot = std::fma(float(isum), tile_scale(t, sb, ti, 0, r) * a.d, tot);
            if (t == GgmlType::Q4_K) tot = std::fma(-tile_min(sb, ti, r), a.dsum, tot);
          }
        }
        *out = tot;
      }
  }
}

}  // namespace detail

namespace {

detail::QPanelsFn pick_kernel(const char** name) {
  const GemmBackend b = gemm_backend();
  if (b != GemmBackend::Reference && b != GemmBackend::Avx2 && vnni_available()) {
    *name = "avx512vnni";
    return detail::qpanels_avx512vnni;
  }
  if (b != GemmBackend::Reference && avx2_available()) {
    *name = "avx2";
    return detail::qpanels_avx2;
  }
  *name = "reference";
  return detail::qpanels_reference;
}

}  // namespace

const char* qgemm_kernel_name() {
  const char* name = nullptr;
  pick_kernel(&name);
  return name;
}

void qgemm(const float* x, int m, int64_t ldx, int64_t k, const QuantPart* parts, int nparts, float* y, int64_t ldy,
           bool accumulate) {
  const char* name = nullptr;
  const detail::QPanelsFn fn = pick_kernel(&name);
  thread_local Buffer<QActBlock> xq;
  xq.resize(size_t(m) * size_t(k / 32));
  quantize_activations(x, m, ldx, k, xq.data());
  // Tasks of a few panels each, over every part; a task's outputs are disjoint from the others'.
  struct Task { int part, p0, p1; };
  thread_local std::vector<Task> tasks;
  tasks.clear();
  const int per_task = m <= 16 ? 4 : 2;
  for (int j = 0; j < nparts; ++j) {
    const int panels = (parts[j].rows + kQPanelRows - 1) / kQPanelRows;
    for (int p = 0; p < panels; p += per_task) tasks.push_back({j, p, std::min(panels, p + per_task)});
  }
  const std::vector<Task>& ts = tasks;
  const QActBlock* xb = xq.data();
  parallel_for(int(ts.size()), [&](int i) {
    const QuantPart& q = parts[ts[size_t(i)].part];
    fn(q.type, q.data, q.rows, k, ts[size_t(i)].p0, ts[size_t(i)].p1, xb, m, y + q.row0, ldy, accumulate);
  });
}

}  // namespace dspark

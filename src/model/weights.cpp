#include "model/weights.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "kernels/qgemm.h"

namespace dspark {

namespace {
size_t align64(size_t b) { return (b + 63) / 64 * 64; }
}  // namespace

WeightArena::WeightArena(DType dtype, size_t matrix_bytes) : dtype_(dtype), matrices_(matrix_bytes) {
  if (dtype != DType::BF16 && dtype != DType::F32) fail("weights can be held as bf16 or f32, not ", dtype_name(dtype));
}

size_t WeightArena::matrix_bytes(DType dtype, int64_t rows, int64_t cols) {
  const size_t row_bytes = size_t(rows * cols) * dtype_size(dtype);
  return align64(dtype == DType::BF16 ? std::max(row_bytes, panel_bytes(rows, cols)) : row_bytes);
}

WeightMatrix WeightArena::take(int64_t rows, int64_t cols) {
  const size_t bytes = matrix_bytes(dtype_, rows, cols);
  if (used_ + bytes > matrices_.bytes()) fail("internal: weight arena too small");
  WeightMatrix w{dtype_, int(rows), int(cols), cols, static_cast<uint8_t*>(matrices_.data()) + used_};
  used_ += bytes;
  return w;
}

void WeightArena::fill(const WeightSource& src, const std::string& name, WeightMatrix& w, int64_t row0, int64_t rows) {
  src.read(name, {rows, w.k}, dtype_,
           static_cast<uint8_t*>(const_cast<void*>(w.data)) + size_t(row0 * w.ld) * dtype_size(dtype_), w.ld);
}

WeightMatrix WeightArena::matrix(const WeightSource& src, const std::string& name, int64_t rows, int64_t cols) {
  WeightMatrix w = take(rows, cols);
  fill(src, name, w, 0, rows);
  return w;
}

bool quantized_kernels_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("DSPARK_QUANTIZED_KERNELS");
    if (!v || !*v || std::string(v) == "1") return true;
    if (std::string(v) == "0") return false;
    fail("environment variable DSPARK_QUANTIZED_KERNELS must be 0 or 1, got '", v, "'");
  }();
  return on;
}

bool WeightArena::holds_quantized(const WeightSource& src, const std::vector<std::pair<std::string, int64_t>>& parts,
                                  int64_t cols) const {
  if (dtype_ != DType::BF16 || parts.size() > 3 || !quantized_kernels_enabled()) return false;
  int64_t rows = 0;
  for (const auto& [name, n] : parts) {
    const std::optional<GgmlType> t = src.block_type(name, {n, cols});
    if (!t || !qgemm_supports(*t) || cols % qgemm_superblock(*t) != 0 || rows % kQPanelRows != 0) return false;
    rows += n;
  }
  return true;
}

WeightMatrix WeightArena::stacked(const WeightSource& src, const std::vector<std::pair<std::string, int64_t>>& parts,
                                  int64_t cols, bool pack_it) {
  int64_t rows = 0;
  for (const auto& part : parts) rows += part.second;
  if (!holds_quantized(src, parts, cols)) {
    WeightMatrix w = take(rows, cols);
    int64_t r0 = 0;
    for (const auto& [name, n] : parts) {
      fill(src, name, w, r0, n);
      r0 += n;
    }
    if (pack_it) pack(w);
    return w;
  }
  WeightMatrix w;
  w.dtype = DType::U8;
  w.n = int(rows);
  w.k = int(cols);
  w.ld = cols;
  std::vector<uint8_t> blocks;
  int64_t r0 = 0;
  for (size_t j = 0; j < parts.size(); ++j) {
    const auto& [name, n] = parts[j];
    const GgmlType type = *src.block_type(name, {n, cols});
    const size_t bytes = align64(qgemm_matrix_bytes(type, n, cols));
    if (used_ + bytes > matrices_.bytes()) fail("internal: weight arena too small");
    auto* dst = static_cast<uint8_t*>(matrices_.data()) + used_;
    used_ += bytes;
    blocks.resize(ggml_row_bytes(type, cols) * size_t(n));
    src.read_blocks(name, {n, cols}, blocks.data());
    qgemm_pack(type, blocks.data(), n, cols, dst);
    w.parts[j] = QuantPart{type, int(r0), int(n), dst};
    r0 += n;
  }
  w.nparts = int(parts.size());
  w.data = w.parts[0].data;
  return w;
}

void WeightArena::pack(WeightMatrix& w) {
  if (!w.quantized() && w.dtype == DType::BF16 && !w.panels && gemm_wants_panels()) w = pack_panels(w, const_cast<void*>(w.data));
}

WeightMatrix WeightArena::row_copy(const WeightMatrix& w, std::span<const int32_t> rows) {
  WeightMatrix dst = take(int64_t(rows.size()), w.k);
  auto* out = static_cast<uint8_t*>(const_cast<void*>(dst.data));
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t c = 0; c < w.k; ++c) {
      const float v = weight_at(w, rows[i], c);
      if (dtype_ == DType::BF16)
        reinterpret_cast<uint16_t*>(out)[int64_t(i) * dst.ld + c] = f32_to_bf16(v);
      else
        reinterpret_cast<float*>(out)[int64_t(i) * dst.ld + c] = v;
    }
  pack(dst);
  return dst;
}

WeightMatrix WeightArena::packed_copy(const WeightMatrix& w) {
  if (w.quantized() || w.dtype != DType::BF16 || w.panels || !gemm_wants_panels()) return w;
  WeightMatrix dst = take(w.n, w.k);
  return pack_panels(w, const_cast<void*>(dst.data));
}

const float* WeightArena::vector(const WeightSource& src, const std::string& name, int64_t n) {
  return f32(src, name, {n});
}

const float* WeightArena::stacked_vector(const WeightSource& src,
                                         const std::vector<std::pair<std::string, int64_t>>& parts) {
  int64_t n = 0;
  for (const auto& [name, len] : parts) n += len;
  auto& v = vectors_.emplace_back(static_cast<size_t>(n));
  int64_t at = 0;
  for (const auto& [name, len] : parts) {
    src.read(name, {len}, DType::F32, v.data() + at, len);
    at += len;
  }
  return v.data();
}

const float* WeightArena::f32(const WeightSource& src, const std::string& name, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  auto& v = vectors_.emplace_back(static_cast<size_t>(n));
  src.read(name, shape, DType::F32, v.data(), shape.empty() ? 1 : shape.back());
  return v.data();
}

size_t decoder_layer_bytes(const ModelConfig& c, DType dtype, int64_t in) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  return WeightArena::matrix_bytes(dtype, c.q_dim() + 2 * c.kv_dim(), in) +
         WeightArena::matrix_bytes(dtype, H, c.q_dim()) + WeightArena::matrix_bytes(dtype, 2 * I, H) +
         WeightArena::matrix_bytes(dtype, H, I);
}

std::vector<std::string> decoder_layer_names(const ModelConfig& c, const std::string& p) {
  std::vector<std::string> n;
  for (const char* s : {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                        "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
    n.push_back(p + s);
  if (c.qk_norm) {
    n.push_back(p + "self_attn.q_norm.weight");
    n.push_back(p + "self_attn.k_norm.weight");
  }
  if (c.attention_bias)
    for (const char* s : {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"}) n.push_back(p + s);
  return n;
}

LayerWeights load_decoder_layer(const WeightSource& src, const std::string& p, const ModelConfig& c, WeightArena& arena,
                                int64_t in) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, q = c.q_dim(), kv = c.kv_dim();
  LayerWeights L;
  // The K/V rows of qkv are also used on their own (a view from row q), which panels allow
  // only at a multiple of 16 rows.
  L.qkv = arena.stacked(src, {{p + "self_attn.q_proj.weight", q}, {p + "self_attn.k_proj.weight", kv},
                              {p + "self_attn.v_proj.weight", kv}}, in, q % kPanelRows == 0);
  L.o = arena.stacked(src, {{p + "self_attn.o_proj.weight", H}}, q);
  L.gate_up = arena.stacked(src, {{p + "mlp.gate_proj.weight", I}, {p + "mlp.up_proj.weight", I}}, H);
  L.down = arena.stacked(src, {{p + "mlp.down_proj.weight", H}}, I);
  L.attn_norm = arena.vector(src, p + "input_layernorm.weight", H);
  L.mlp_norm = arena.vector(src, p + "post_attention_layernorm.weight", H);
  if (c.qk_norm) {
    L.q_norm = arena.vector(src, p + "self_attn.q_norm.weight", c.head_dim);
    L.k_norm = arena.vector(src, p + "self_attn.k_norm.weight", c.head_dim);
  }
  if (c.attention_bias)
    L.qkv_bias = arena.stacked_vector(
        src, {{p + "self_attn.q_proj.bias", q}, {p + "self_attn.k_proj.bias", kv}, {p + "self_attn.v_proj.bias", kv}});
  return L;
}

void quantize_int8_if_paired(WeightMatrix& w) {
  if (w.dtype == DType::BF16 && w.panels && w.pairs) w = quantize_int8(w);
}

void quantize_int8_if_paired(LayerWeights& L) {
  for (WeightMatrix* w : {&L.qkv, &L.o, &L.gate_up, &L.down}) quantize_int8_if_paired(*w);
}

}  // namespace dspark

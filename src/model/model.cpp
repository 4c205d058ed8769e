#include "model/model.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/mmap_file.h"

namespace dspark {

namespace {

std::string layer_prefix(int i) { return "model.layers." + std::to_string(i) + "."; }

struct MatrixSpec {
  std::string name;
  int64_t rows, cols;
};

}  // namespace

std::vector<std::string> expected_tensor_names(const ModelConfig& c) {
  std::vector<std::string> n{"model.embed_tokens.weight"};
  for (int i = 0; i < c.num_layers; ++i) {
    std::string p = layer_prefix(i);
    for (const char* s : {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
      n.push_back(p + s);
    if (c.qk_norm) {
      n.push_back(p + "self_attn.q_norm.weight");
      n.push_back(p + "self_attn.k_norm.weight");
    }
  }
  n.push_back("model.norm.weight");
  if (!c.tie_word_embeddings) n.push_back("lm_head.weight");
  return n;
}

std::unique_ptr<Model> Model::load(const std::string& dir, const LoadOptions& opt) {
  ModelConfig cfg = ModelConfig::from_dir(dir);
  auto store = TensorStore::open_dir(dir);
  // Every tensor must be one the architecture uses (a few known extras are tolerated).
  auto expected = expected_tensor_names(cfg);
  std::set<std::string> known(expected.begin(), expected.end());
  for (const auto& [name, view] : store->tensors()) {
    if (known.count(name)) continue;
    if (name == "lm_head.weight" && cfg.tie_word_embeddings) continue;
    if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    fail(view.file, ": unexpected tensor '", name, "' for ", cfg.architecture, " with ", cfg.num_layers,
         " layers");
  }
  auto src = checkpoint_source(std::move(store));
  auto m = build(cfg, *src, opt);
  m->path_ = dir;
  return m;
}

std::unique_ptr<Model> Model::build(const ModelConfig& cfg, const WeightSource& src, const LoadOptions& opt) {
  if (opt.dtype != DType::BF16 && opt.dtype != DType::F32)
    fail("weights can be held as bf16 or f32, not ", dtype_name(opt.dtype));
  auto m = std::unique_ptr<Model>(new Model());
  m->cfg_ = cfg;
  m->dtype_ = opt.dtype;
  const int64_t H = cfg.hidden_size, I = cfg.intermediate_size, V = cfg.vocab_size;
  const int64_t q = cfg.q_dim(), kv = cfg.kv_dim();
  const size_t esz = dtype_size(opt.dtype);

  // One allocation holds every matrix; each starts on a 64-byte boundary.
  auto align = [](size_t b) { return (b + 63) / 64 * 64; };
  size_t total = align(size_t(V * H) * esz);
  if (!cfg.tie_word_embeddings) total += align(size_t(V * H) * esz);
  const size_t per_layer = align(size_t((q + 2 * kv) * H) * esz) + align(size_t(H * q) * esz) +
                           align(size_t(2 * I * H) * esz) + align(size_t(H * I) * esz);
  total += per_layer * size_t(cfg.num_layers);
  m->matrices_ = HugeBuffer(total);
  m->matrix_bytes_ = total;
  uint8_t* cursor = static_cast<uint8_t*>(m->matrices_.data());
  auto take = [&](int64_t rows, int64_t cols) {
    WeightMatrix w{opt.dtype, int(rows), int(cols), cols, cursor};
    cursor += align(size_t(rows * cols) * esz);
    return w;
  };
  auto fill = [&](const WeightMatrix& w, int64_t row0, const std::string& name, int64_t rows) {
    src.read(name, {rows, w.k}, opt.dtype, static_cast<uint8_t*>(const_cast<void*>(w.data)) + size_t(row0 * w.ld) * esz,
             w.ld);
  };

  // Norm vectors: [attn, mlp, (q, k)] per layer, then the final norm.
  const int64_t hd = cfg.head_dim;
  const int64_t norm_per_layer = 2 * H + (cfg.qk_norm ? 2 * hd : 0);
  m->norms_.resize(size_t(norm_per_layer * cfg.num_layers + H));
  float* nc = m->norms_.data();
  auto norm = [&](const std::string& name, int64_t n) {
    src.read(name, {n}, DType::F32, nc, n);
    const float* p = nc;
    nc += n;
    return p;
  };

  m->embed_ = take(V, H);
  fill(m->embed_, 0, "model.embed_tokens.weight", V);
  m->layers_.resize(size_t(cfg.num_layers));
  for (int i = 0; i < cfg.num_layers; ++i) {
    const std::string p = layer_prefix(i);
    LayerWeights& L = m->layers_[size_t(i)];
    L.qkv = take(q + 2 * kv, H);
    fill(L.qkv, 0, p + "self_attn.q_proj.weight", q);
    fill(L.qkv, q, p + "self_attn.k_proj.weight", kv);
    fill(L.qkv, q + kv, p + "self_attn.v_proj.weight", kv);
    L.o = take(H, q);
    fill(L.o, 0, p + "self_attn.o_proj.weight", H);
    L.gate_up = take(2 * I, H);
    fill(L.gate_up, 0, p + "mlp.gate_proj.weight", I);
    fill(L.gate_up, I, p + "mlp.up_proj.weight", I);
    L.down = take(H, I);
    fill(L.down, 0, p + "mlp.down_proj.weight", H);
    L.attn_norm = norm(p + "input_layernorm.weight", H);
    L.mlp_norm = norm(p + "post_attention_layernorm.weight", H);
    if (cfg.qk_norm) {
      L.q_norm = norm(p + "self_attn.q_norm.weight", hd);
      L.k_norm = norm(p + "self_attn.k_norm.weight", hd);
    }
  }
  m->final_norm_ = norm("model.norm.weight", H);
  if (cfg.tie_word_embeddings) {
    m->lm_head_ = m->embed_;
  } else {
    m->lm_head_ = take(V, H);
    fill(m->lm_head_, 0, "lm_head.weight", V);
  }
  m->inv_freq_ = cfg.rope_inv_freq();
  return m;
}

void save_model_dir(const ModelConfig& cfg, const WeightSource& src, const std::string& dir, DType stored_as) {
  std::filesystem::create_directories(dir);
  SafetensorsWriter w;
  for (const std::string& name : expected_tensor_names(cfg)) {
    std::vector<int64_t> shape;
    const int64_t H = cfg.hidden_size, I = cfg.intermediate_size;
    auto ends = [&](const char* s) { return name.size() >= std::strlen(s) && name.compare(name.size() - std::strlen(s), std::string::npos, s) == 0; };
    if (ends("embed_tokens.weight") || name == "lm_head.weight") shape = {cfg.vocab_size, H};
    else if (ends("q_proj.weight")) shape = {cfg.q_dim(), H};
    else if (ends("k_proj.weight") || ends("v_proj.weight")) shape = {cfg.kv_dim(), H};
    else if (ends("o_proj.weight")) shape = {H, cfg.q_dim()};
    else if (ends("gate_proj.weight") || ends("up_proj.weight")) shape = {I, H};
    else if (ends("down_proj.weight")) shape = {H, I};
    else if (ends("q_norm.weight") || ends("k_norm.weight")) shape = {cfg.head_dim};
    else shape = {H};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> data(static_cast<size_t>(n));
    src.read(name, shape, DType::F32, data.data(), shape.back());
    w.add_f32(name, shape, data.data(), shape.size() == 1 ? DType::F32 : stored_as);
  }
  w.write((std::filesystem::path(dir) / "model.safetensors").string());
  std::string cj = cfg.to_json().dump(2) + "\n";
  write_file_atomic((std::filesystem::path(dir) / "config.json").string(), cj.data(), cj.size());
}

}  // namespace dspark

#include "model/model.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/gguf.h"
#include "core/mmap_file.h"
#include "model/gguf_model.h"

namespace dspark {

namespace {

std::string layer_prefix(int i) { return "model.layers." + std::to_string(i) + "."; }


}  // namespace

std::vector<std::string> expected_tensor_names(const ModelConfig& c) {
  std::vector<std::string> n{"model.embed_tokens.weight"};
  for (int i = 0; i < c.num_layers; ++i)
    for (auto& name : decoder_layer_names(c, layer_prefix(i))) n.push_back(name);
  n.push_back("model.norm.weight");
  if (!c.tie_word_embeddings) n.push_back("lm_head.weight");
  return n;
}

namespace {

std::unique_ptr<WeightSource> open_gguf(const std::string& path, ModelConfig* cfg, const nlohmann::json& overrides) {
  auto f = std::make_shared<const GgufFile>(path);
  *cfg = gguf_model_config(*f, overrides);
  auto expected = expected_tensor_names(*cfg);
  std::set<std::string> known(expected.begin(), expected.end());
  for (const GgufTensor& t : f->tensors()) {
    if (t.name == "rope_freqs.weight") continue;  // read into the config
    const std::string hf = hf_tensor_name(t.name);
    if (hf.empty() || !known.count(hf))
      fail(path, ": unexpected tensor '", t.name, "' for ", cfg->architecture, " with ", cfg->num_layers, " layers");
  }
  return gguf_source(std::move(f), *cfg);
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& dir, const LoadOptions& opt) {
  if (const auto gguf = find_gguf(dir)) {
    ModelConfig cfg;
    auto src = open_gguf(*gguf, &cfg, opt.hf_overrides);
    auto m = build(cfg, *src, opt);
    m->path_ = *gguf;
    return m;
  }
  ModelConfig cfg = ModelConfig::from_dir(dir, opt.hf_overrides);
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

std::unique_ptr<Model> Model::build(const ModelConfig& cfg, const WeightSource& source, const LoadOptions& opt) {
  auto m = std::unique_ptr<Model>(new Model());
  std::unique_ptr<WeightSource> quantized;
  if (opt.quantization)
    quantized = quantizing_source(source, *opt.quantization, &m->quantized_, false, output_head_tensor(cfg));
  const WeightSource& src = quantized ? *quantized : source;
  m->cfg_ = cfg;
  m->dtype_ = opt.dtype;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  // A tied lm_head gets its own panel-packed copy (the embedding rows stay for lookups).
  size_t total = WeightArena::matrix_bytes(opt.dtype, V, H) * 2;
  total += decoder_layer_bytes(cfg, opt.dtype, H) * size_t(cfg.num_layers);
  m->arena_ = std::make_unique<WeightArena>(opt.dtype, total);
  WeightArena& a = *m->arena_;
  m->embed_ = a.matrix(src, "model.embed_tokens.weight", V, H);
  for (int i = 0; i < cfg.num_layers; ++i) m->layers_.push_back(load_decoder_layer(src, layer_prefix(i), cfg, a, H));
  m->final_norm_ = a.vector(src, "model.norm.weight", H);
  // A tied lm_head held quantized reads the embedding's blocks again (the kernels' layout); else
  // it is a panel-packed copy of the embedding rows.
  if (cfg.tie_word_embeddings) {
    const std::vector<std::pair<std::string, int64_t>> embed{{"model.embed_tokens.weight", V}};
    m->lm_head_ = a.holds_quantized(src, embed, H) ? a.stacked(src, embed, H) : a.packed_copy(m->embed_);
  } else {
    m->lm_head_ = a.stacked(src, {{"lm_head.weight", V}}, H);
  }
  m->rope_ = cfg.rope();
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
    else if (ends("q_proj.bias")) shape = {cfg.q_dim()};
    else if (ends("k_proj.bias") || ends("v_proj.bias")) shape = {cfg.kv_dim()};
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

// Tiny random targets and drafters in real checkpoint layouts (DeepSpec DSpark, z-lab DFlash,
// Speculators DSpark and EAGLE-3 with a reduced draft vocabulary), for the speculative tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "model/model.h"
#include "spec_decode/drafter_config.h"

namespace dspark::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("dspark_spec_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A small Qwen3 target: 3 layers, hidden 64, vocabulary `vocab`.
inline ModelConfig tiny_target(int vocab) {
  ModelConfig c = shape_config("tiny-qwen3");
  c.vocab_size = vocab;
  c.num_layers = 3;
  c.bos_token_id = -1;
  c.eos_token_ids = {};
  c.max_position_embeddings = 4096;
  return c;
}

// Writes tensors drawn from random_source(seed, std) under `names` with their shapes.
inline void write_random(SafetensorsWriter& w, const std::vector<std::pair<std::string, std::vector<int64_t>>>& specs,
                         uint64_t seed, float std) {
  auto src = random_source(seed, std);
  for (const auto& [name, shape] : specs) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    src->read(name, shape, DType::F32, v.data(), shape.back());
    w.add_f32(name, shape, v.data(), DType::F32);
  }
}

inline std::vector<std::pair<std::string, std::vector<int64_t>>> layer_specs(const ModelConfig& c, const std::string& p,
                                                                             int64_t in) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  std::vector<std::pair<std::string, std::vector<int64_t>>> s = {
      {p + "input_layernorm.weight", {H}},
      {p + "self_attn.q_proj.weight", {c.q_dim(), in}},
      {p + "self_attn.k_proj.weight", {c.kv_dim(), in}},
      {p + "self_attn.v_proj.weight", {c.kv_dim(), in}},
      {p + "self_attn.o_proj.weight", {H, c.q_dim()}},
      {p + "post_attention_layernorm.weight", {H}},
      {p + "mlp.gate_proj.weight", {I, H}},
      {p + "mlp.up_proj.weight", {I, H}},
      {p + "mlp.down_proj.weight", {H, I}}};
  if (c.qk_norm) {
    s.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
    s.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
  }
  return s;
}

struct DrafterSpec {
  int layers = 1;
  int block = 4;
  int rank = 8;                   // DSpark Markov rank (0: none)
  std::string head = "vanilla";   // vanilla | gated | rnn
  bool confidence = true;
  bool own_embed = false;         // ship embed_tokens / lm_head (else the target's are used)
  std::vector<int> target_layers{0, 2};
  uint64_t seed = 11;
  float std = 0.15f;
};

// DSpark, DeepSpec layout (or the Speculators wrapper when `speculators`).
inline void write_dspark(const std::string& dir, const ModelConfig& t, const DrafterSpec& s, bool speculators = false) {
  fs::create_directories(dir);
  ModelConfig L = t;
  L.num_layers = s.layers;
  DrafterConfig dc;
  dc.method = SpecMethod::DSpark;
  dc.layers = L;
  dc.block_size = s.block;
  dc.target_layer_ids = s.target_layers;
  dc.mask_token_id = t.vocab_size - 1;
  dc.markov_rank = s.rank;
  dc.markov_head_type = s.head;
  dc.confidence_head = s.confidence;
  dc.confidence_with_markov = s.rank > 0;
  json cfg = dc.to_deepspec_json();
  if (speculators) {
    json layer = L.to_json();
    layer.erase("architectures");
    std::vector<int> aux;
    for (int id : s.target_layers) aux.push_back(id + 1);
    cfg = {{"architectures", {"DSparkSpeculator"}}, {"speculators_model_type", "dspark"},
           {"speculators_config", {{"algorithm", "dspark"}, {"proposal_methods", {{{"proposal_type", "greedy"}, {"speculative_tokens", s.block}}}}}},
           {"transformer_layer_config", layer}, {"block_size", s.block}, {"mask_token_id", dc.mask_token_id},
           {"aux_hidden_state_layer_ids", aux}, {"sample_from_anchor", true}, {"markov_rank", s.rank},
           {"markov_head_type", s.head}, {"enable_confidence_head", s.confidence},
           {"confidence_head_with_markov", s.rank > 0}};
  }
  std::ofstream(fs::path(dir) / "config.json") << cfg.dump(2);
  const int64_t H = t.hidden_size, V = t.vocab_size, r = s.rank;
  std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
      {"fc.weight", {H, int64_t(s.target_layers.size()) * H}}, {"hidden_norm.weight", {H}}, {"norm.weight", {H}}};
  for (int i = 0; i < s.layers; ++i)
    for (auto& x : layer_specs(L, "layers." + std::to_string(i) + ".", H)) specs.push_back(x);
  if (r > 0) {
    specs.push_back({"markov_head.markov_w1.weight", {V, r}});
    specs.push_back({"markov_head.markov_w2.weight", {V, r}});
    if (s.head == "gated") {
      specs.push_back({"markov_head.gate_proj.weight", {r, H + r}});
      specs.push_back({"markov_head.gate_proj.bias", {r}});
    }
    if (s.head == "rnn") {
      specs.push_back({"markov_head.joint_proj.weight", {3 * r, 2 * r + H}});
      specs.push_back({"markov_head.joint_proj.bias", {3 * r}});
    }
  }
  if (s.confidence) {
    specs.push_back({"confidence_head.proj.weight", {1, H + (r > 0 ? r : 0)}});
    specs.push_back({"confidence_head.proj.bias", {1}});
  }
  if (s.own_embed) {
    specs.push_back({"embed_tokens.weight", {V, H}});
    specs.push_back({"lm_head.weight", {V, H}});
  }
  SafetensorsWriter w;
  write_random(w, specs, s.seed, s.std);
  w.write((fs::path(dir) / "model.safetensors").string());
}

// DFlash, z-lab layout (no embeddings or head: the target's are used).
inline void write_dflash(const std::string& dir, const ModelConfig& t, const DrafterSpec& s) {
  fs::create_directories(dir);
  ModelConfig L = t;
  L.num_layers = s.layers;
  json cfg = L.to_json();
  cfg["architectures"] = {"DFlashDraftModel"};
  cfg["block_size"] = s.block;
  cfg["num_target_layers"] = t.num_layers;
  cfg["dflash_config"] = {{"mask_token_id", t.vocab_size - 1}, {"target_layer_ids", s.target_layers}};
  std::ofstream(fs::path(dir) / "config.json") << cfg.dump(2);
  const int64_t H = t.hidden_size;
  std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
      {"fc.weight", {H, int64_t(s.target_layers.size()) * H}}, {"hidden_norm.weight", {H}}, {"norm.weight", {H}}};
  for (int i = 0; i < s.layers; ++i)
    for (auto& x : layer_specs(L, "layers." + std::to_string(i) + ".", H)) specs.push_back(x);
  SafetensorsWriter w;
  write_random(w, specs, s.seed, s.std);
  w.write((fs::path(dir) / "model.safetensors").string());
}

// EAGLE-3, Speculators layout, with a draft vocabulary of every other target id (d2t / t2d);
// `s.layers` decoder layers (layers.1.. are plain ones after the fused first layer).
inline void write_eagle3(const std::string& dir, const ModelConfig& t, const DrafterSpec& s, bool reduced_vocab = true) {
  fs::create_directories(dir);
  ModelConfig L = t;
  L.num_layers = s.layers;
  std::vector<int64_t> selected;
  for (int64_t v = 0; v < t.vocab_size; v += reduced_vocab ? 2 : 1) selected.push_back(v);
  const int64_t Vd = int64_t(selected.size()), H = t.hidden_size;
  json layer = L.to_json();
  layer.erase("architectures");
  std::vector<int> aux;
  for (int id : s.target_layers) aux.push_back(id + 1);
  json cfg = {{"architectures", {"Eagle3Speculator"}}, {"speculators_model_type", "eagle3"},
              {"speculators_config", {{"algorithm", "eagle3"}, {"proposal_methods", {{{"proposal_type", "greedy"}, {"speculative_tokens", 3}}}}}},
              {"transformer_layer_config", layer}, {"draft_vocab_size", Vd}, {"eagle_aux_hidden_state_layer_ids", aux},
              {"norm_before_residual", true}};
  std::ofstream(fs::path(dir) / "config.json") << cfg.dump(2);
  std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
      {"fc.weight", {H, int64_t(s.target_layers.size()) * H}}, {"layers.0.hidden_norm.weight", {H}},
      {"norm.weight", {H}}, {"lm_head.weight", {Vd, H}}};
  for (auto& x : layer_specs(L, "layers.0.", 2 * H)) specs.push_back(x);
  for (int i = 1; i < s.layers; ++i)
    for (auto& x : layer_specs(L, "layers." + std::to_string(i) + ".", H)) specs.push_back(x);
  SafetensorsWriter w;
  write_random(w, specs, s.seed, s.std);
  std::vector<int64_t> d2t;
  for (int64_t i = 0; i < Vd; ++i) d2t.push_back(selected[size_t(i)] - i);
  std::vector<uint8_t> t2d(size_t(t.vocab_size), 0);
  for (int64_t v : selected) t2d[size_t(v)] = 1;
  w.add("d2t", DType::I64, {Vd}, d2t.data());
  w.add("t2d", DType::BOOL, {t.vocab_size}, t2d.data());
  w.write((fs::path(dir) / "model.safetensors").string());
}

}  // namespace dspark::testing

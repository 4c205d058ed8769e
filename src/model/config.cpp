#include "model/config.h"
#include "model/gguf_model.h"

#include <array>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/gguf.h"
#include "core/mmap_file.h"

namespace dspark {

using json = nlohmann::json;

namespace {

struct Reader {
  const json& j;
  const std::string& src;

  const json* find(const char* key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  int positive_int(const char* key) const {
    const json* v = find(key);
    if (!v) fail(src, ": missing field '", key, "'");
    if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() > (int64_t(1) << 30))
      fail(src, ": field '", key, "' must be a positive integer, got ", v->dump());
    return v->get<int>();
  }
  int positive_int_or(const char* key, int dflt) const { return find(key) ? positive_int(key) : dflt; }
  float positive_float_or(const char* key, float dflt) const {
    const json* v = find(key);
    if (!v) return dflt;
    if (!v->is_number() || !(v->get<double>() > 0)) fail(src, ": field '", key, "' must be a positive number, got ", v->dump());
    return v->get<float>();
  }
  bool bool_or(const char* key, bool dflt) const {
    const json* v = find(key);
    if (!v) return dflt;
    if (!v->is_boolean()) fail(src, ": field '", key, "' must be true or false, got ", v->dump());
    return v->get<bool>();
  }
};

}  // namespace

ModelConfig ModelConfig::from_json(const json& j, const std::string& src) {
  if (!j.is_object()) fail(src, ": expected a JSON object");
  Reader r{j, src};
  ModelConfig c;
  const json* archs = r.find("architectures");
  if (!archs || !archs->is_array() || archs->empty() || !(*archs)[0].is_string())
    fail(src, ": field 'architectures' must be a non-empty list of names");
  c.architecture = (*archs)[0].get<std::string>();
  if (c.architecture == "Qwen3ForCausalLM") {
    c.arch = Arch::Qwen3;
    c.qk_norm = true;
  } else if (c.architecture == "Qwen2ForCausalLM") {
    c.arch = Arch::Qwen2;
    c.attention_bias = true;  // Qwen2 always has q/k/v biases (no config field)
  } else if (c.architecture == "LlamaForCausalLM") {
    c.arch = Arch::Llama;
  } else {
    fail(src, ": unsupported architecture '", c.architecture,
         "' in field 'architectures' (supported: Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM)");
  }
  c.vocab_size = r.positive_int("vocab_size");
  c.hidden_size = r.positive_int("hidden_size");
  c.intermediate_size = r.positive_int("intermediate_size");
  c.num_layers = r.positive_int("num_hidden_layers");
  c.num_heads = r.positive_int("num_attention_heads");
  c.num_kv_heads = r.positive_int_or("num_key_value_heads", c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0)
    fail(src, ": field 'num_attention_heads' (", c.num_heads, ") must be a multiple of 'num_key_value_heads' (",
         c.num_kv_heads, ")");
  if (r.find("head_dim")) {
    c.head_dim = r.positive_int("head_dim");
  } else {
    if (c.hidden_size % c.num_heads != 0)
      fail(src, ": 'hidden_size' (", c.hidden_size, ") is not divisible by 'num_attention_heads' (", c.num_heads,
           ") and no 'head_dim' is given");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) fail(src, ": field 'head_dim' must be even for RoPE, got ", c.head_dim);
  c.rms_norm_eps = r.positive_float_or("rms_norm_eps", 1e-6f);
  c.max_position_embeddings = r.positive_int_or("max_position_embeddings", 32768);
  // RoPE: the classic top-level fields, or transformers' newer `rope_parameters`.
  const json* rp = r.find("rope_parameters");
  const json* rs = r.find("rope_scaling");
  c.rope_theta = r.positive_float_or("rope_theta", c.arch == Arch::Llama ? 10000.f : 1000000.f);
  if (rp) {
    if (!rp->is_object()) fail(src, ": field 'rope_parameters' must be an object");
    Reader rr{*rp, src};
    c.rope_theta = rr.positive_float_or("rope_theta", c.rope_theta);
    if (!rs) rs = rp;
  }
  c.config_max_position_embeddings = c.max_position_embeddings;
  if (rs && !rs->is_null()) {
    if (!rs->is_object()) fail(src, ": field 'rope_scaling' must be an object or null");
    std::string type;
    if (auto t = rs->find("rope_type"); t != rs->end() && t->is_string()) type = t->get<std::string>();
    else if (auto t2 = rs->find("type"); t2 != rs->end() && t2->is_string()) type = t2->get<std::string>();
    Reader sr{*rs, src};
    RopeScaling& s = c.rope_scaling;
    if (type == "llama3") {
      s.type = type;
      s.factor = sr.positive_float_or("factor", 8.f);
      s.low_freq_factor = sr.positive_float_or("low_freq_factor", 1.f);
      s.high_freq_factor = sr.positive_float_or("high_freq_factor", 4.f);
      s.original_max_position_embeddings = sr.positive_int_or("original_max_position_embeddings", 8192);
      if (s.high_freq_factor <= s.low_freq_factor)
        fail(src, ": rope_scaling 'high_freq_factor' must exceed 'low_freq_factor'");
    } else if (type == "yarn" || type == "linear" || type == "dynamic") {
      s.type = type;
      if (!sr.find("factor")) fail(src, ": rope_scaling of type '", type, "' needs 'factor'");
      s.factor = sr.positive_float_or("factor", 1.f);
      if (s.factor < 1.f) fail(src, ": rope_scaling 'factor' must be at least 1, got ", s.factor);
      int base_len = c.max_position_embeddings;
      if (type == "yarn") {
        s.original_max_position_embeddings =
            sr.positive_int_or("original_max_position_embeddings", c.max_position_embeddings);
        base_len = s.original_max_position_embeddings;
        s.beta_fast = sr.positive_float_or("beta_fast", 32.f);
        s.beta_slow = sr.positive_float_or("beta_slow", 1.f);
        s.attention_factor = sr.positive_float_or("attention_factor", 0.f);
        s.mscale = sr.positive_float_or("mscale", 0.f);
        s.mscale_all_dim = sr.positive_float_or("mscale_all_dim", 0.f);
        s.truncate = sr.bool_or("truncate", true);
        if (s.beta_fast <= s.beta_slow) fail(src, ": rope_scaling 'beta_fast' must exceed 'beta_slow'");
      }
      // vLLM's max_model_len: the pretrained length times the factor.
      const double longest = double(base_len) * double(s.factor);
      if (longest > double(1 << 30)) fail(src, ": rope_scaling gives a context of ", longest, " positions (at most 2^30)");
      c.max_position_embeddings = int(longest);
    } else if (!type.empty() && type != "default") {
      fail(src, ": unsupported rope scaling type '", type, "' (supported: yarn, linear, dynamic, llama3, default)");
    }
  }
  c.tie_word_embeddings = r.bool_or("tie_word_embeddings", false);
  if (c.arch != Arch::Qwen2 && r.bool_or("attention_bias", false))
    fail(src, ": field 'attention_bias' = true is not supported for ", c.architecture);
  if (r.bool_or("use_sliding_window", false))
    fail(src, ": field 'use_sliding_window' = true is not supported (every layer attends to the whole context)");
  if (r.bool_or("mlp_bias", false)) fail(src, ": field 'mlp_bias' = true is not supported");
  if (const json* act = r.find("hidden_act")) {
    if (!act->is_string() || act->get<std::string>() != "silu")
      fail(src, ": field 'hidden_act' must be \"silu\", got ", act->dump());
  }
  if (const json* b = r.find("bos_token_id"); b && b->is_number_integer()) c.bos_token_id = b->get<int>();
  if (const json* e = r.find("eos_token_id")) {
    if (e->is_number_integer()) {
      c.eos_token_ids.push_back(e->get<int>());
    } else if (e->is_array()) {
      for (const json& x : *e) {
        if (!x.is_number_integer()) fail(src, ": field 'eos_token_id' must hold integers");
        c.eos_token_ids.push_back(x.get<int>());
      }
    } else {
      fail(src, ": field 'eos_token_id' must be an integer or a list of integers");
    }
  }
  for (int id : c.eos_token_ids)
    if (id < 0 || id >= c.vocab_size) fail(src, ": eos_token_id ", id, " is outside the vocabulary (", c.vocab_size, ")");
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  std::string text = read_text_file(path);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) fail(path, ": malformed JSON");
  return from_json(j, path);
}

ModelConfig ModelConfig::from_dir(const std::string& dir, const json& overrides) {
  if (const auto gguf = find_gguf(dir)) return gguf_model_config(GgufFile(*gguf), overrides);
  auto p = std::filesystem::path(dir) / "config.json";
  if (!std::filesystem::exists(p)) fail(dir, ": no config.json in the model directory");
  if (overrides.is_null()) return from_file(p.string());
  json j = json::parse(read_text_file(p.string()), nullptr, false);
  if (j.is_discarded()) fail(p.string(), ": malformed JSON");
  j.merge_patch(overrides);
  return from_json(j, p.string() + " with --hf-overrides");
}

json ModelConfig::to_json() const {
  json j;
  j["architectures"] = {architecture};
  j["model_type"] = arch == Arch::Qwen3 ? "qwen3" : arch == Arch::Qwen2 ? "qwen2" : "llama";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["max_position_embeddings"] = config_max_position_embeddings ? config_max_position_embeddings : max_position_embeddings;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["hidden_act"] = "silu";
  if (arch != Arch::Qwen2) j["attention_bias"] = false;  // Qwen2's biases have no field
  j["torch_dtype"] = "bfloat16";
  const RopeScaling& s = rope_scaling;
  if (s.type == "yarn") {
    j["rope_scaling"] = {{"rope_type", "yarn"},
                         {"factor", s.factor},
                         {"original_max_position_embeddings", s.original_max_position_embeddings},
                         {"beta_fast", s.beta_fast},
                         {"beta_slow", s.beta_slow},
                         {"truncate", s.truncate}};
    if (s.attention_factor > 0) j["rope_scaling"]["attention_factor"] = s.attention_factor;
    if (s.mscale > 0) j["rope_scaling"]["mscale"] = s.mscale;
    if (s.mscale_all_dim > 0) j["rope_scaling"]["mscale_all_dim"] = s.mscale_all_dim;
  } else if (s.type == "linear" || s.type == "dynamic") {
    j["rope_scaling"] = {{"rope_type", s.type}, {"factor", s.factor}};
  } else if (rope_scaling.type == "llama3") {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rope_scaling.factor},
                         {"low_freq_factor", rope_scaling.low_freq_factor},
                         {"high_freq_factor", rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  }
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1) j["eos_token_id"] = eos_token_ids[0];
  else if (!eos_token_ids.empty()) j["eos_token_id"] = eos_token_ids;
  return j;
}

Rope ModelConfig::rope() const {
  const int half = head_dim / 2;
  const double dim = head_dim, base = rope_theta;
  const RopeScaling& s = rope_scaling;
  Rope r;
  std::vector<double>& inv = r.inv_freq;
  inv.resize(size_t(half));
  // dynamic: the NTK-scaled base at the longest context, fixed (as vLLM computes it), so keys
  // cached at one length stay valid at any other.
  const double theta =
      s.type == "dynamic" ? base * std::pow(double(s.factor) * s.factor - (s.factor - 1.0), dim / (dim - 2)) : base;
  for (int i = 0; i < half; ++i) inv[size_t(i)] = 1.0 / std::pow(theta, double(2 * i) / dim);
  if (s.type == "linear") {
    for (double& f : inv) f /= s.factor;
  } else if (s.type == "yarn") {
    // Dimensions rotating more than beta_fast times over the pretrained context keep their
    // frequency, fewer than beta_slow times are interpolated by the factor, a linear ramp between.
    const double old_len = s.original_max_position_embeddings;
    auto correction_dim = [&](double rotations) {
      return dim * std::log(old_len / (rotations * 2 * M_PI)) / (2 * std::log(base));
    };
    double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
    if (s.truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
      const double keep = 1.0 - ramp;  // the share of the extrapolated (unchanged) frequency
      double& f = inv[size_t(i)];
      f = f / s.factor * (1.0 - keep) + f * keep;
    }
    auto mscale = [&](double m) { return s.factor <= 1 ? 1.0 : 0.1 * m * std::log(double(s.factor)) + 1.0; };
    r.scale = s.attention_factor > 0                       ? double(s.attention_factor)
              : (s.mscale > 0 && s.mscale_all_dim > 0) ? mscale(s.mscale) / mscale(s.mscale_all_dim)
                                                       : mscale(1.0);
  } else if (s.type == "llama3") {
    const double old_len = s.original_max_position_embeddings;
    const double low_wavelen = old_len / s.low_freq_factor;
    const double high_wavelen = old_len / s.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * M_PI / f;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else {
        const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  for (size_t i = 0; i < rope_freq_factors.size() && i < inv.size(); ++i) inv[i] /= rope_freq_factors[i];
  return r;
}

std::vector<float> ModelConfig::rope_inv_freq() const {
  const Rope r = rope();
  return std::vector<float>(r.inv_freq.begin(), r.inv_freq.end());
}

int64_t ModelConfig::num_parameters() const {
  int64_t H = hidden_size, I = intermediate_size;
  int64_t per_layer = H * q_dim() * 2 + H * kv_dim() * 2 + 3 * H * I + 2 * H + (qk_norm ? 2 * head_dim : 0) +
                      (attention_bias ? q_dim() + 2 * kv_dim() : 0);
  return int64_t(vocab_size) * H * (tie_word_embeddings ? 1 : 2) + per_layer * num_layers + H;
}

namespace {

// The sizes that tell one shape of an architecture from another, in this order: vocabulary,
// hidden, intermediate, layers, heads, KV heads, head dimension, BOS id; then the EOS ids.
void set_sizes(ModelConfig& c, const std::array<int, 8>& sizes, std::vector<int> eos) {
  static constexpr int ModelConfig::*kFields[] = {
      &ModelConfig::vocab_size, &ModelConfig::hidden_size,  &ModelConfig::intermediate_size,
      &ModelConfig::num_layers, &ModelConfig::num_heads,    &ModelConfig::num_kv_heads,
      &ModelConfig::head_dim,   &ModelConfig::bos_token_id};
  for (size_t i = 0; i < sizes.size(); ++i) c.*kFields[i] = sizes[i];
  c.eos_token_ids = std::move(eos);
}

}  // namespace

ModelConfig shape_config(const std::string& name) {
  ModelConfig c;
  if (name == "qwen3-0.6b" || name == "qwen3-1.7b" || name == "qwen3-4b" || name == "qwen3-8b" ||
      name == "tiny-qwen3") {
    c.arch = Arch::Qwen3;
    c.architecture = "Qwen3ForCausalLM";
    c.qk_norm = true;
    c.rope_theta = 1000000.f;
    c.tie_word_embeddings = true;
    c.max_position_embeddings = 40960;
    if (name == "qwen3-8b") c.tie_word_embeddings = false;
    if (name == "qwen3-0.6b")
      set_sizes(c, {151936, 1024, 3072, 28, 16, 8, 128, 151643}, {151645});
    else if (name == "qwen3-1.7b")
      set_sizes(c, {151936, 2048, 6144, 28, 16, 8, 128, 151643}, {151645});
    else if (name == "qwen3-4b")
      set_sizes(c, {151936, 2560, 9728, 36, 32, 8, 128, 151643}, {151645});
    else if (name == "qwen3-8b")
      set_sizes(c, {151936, 4096, 12288, 36, 32, 8, 128, 151643}, {151645});
    else
      set_sizes(c, {512, 64, 128, 2, 4, 2, 16, 1}, {2});
    return c;
  }
  if (name == "llama-3.2-1b" || name == "tiny-llama") {
    c.arch = Arch::Llama;
    c.architecture = "LlamaForCausalLM";
    c.rope_theta = 500000.f;
    c.rope_scaling = RopeScaling{"llama3", 32.f, 1.f, 4.f, 8192};
    c.max_position_embeddings = 131072;
    c.rms_norm_eps = 1e-5f;
    if (name == "llama-3.2-1b") {
      set_sizes(c, {128256, 2048, 8192, 16, 32, 8, 64, 128000}, {128001, 128008, 128009});
      c.tie_word_embeddings = true;
    } else {
      set_sizes(c, {512, 64, 160, 2, 8, 2, 8, 1}, {2});
      c.tie_word_embeddings = false;
    }
    return c;
  }
  fail("unknown model shape '", name,
       "' (known: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, llama-3.2-1b, tiny-qwen3, tiny-llama)");
}

}  // namespace dspark

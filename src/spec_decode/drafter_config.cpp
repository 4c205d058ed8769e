#include "spec_decode/drafter_config.h"

#include <filesystem>

#include "core/error.h"
#include "core/mmap_file.h"

namespace dspark {

using json = nlohmann::json;

namespace {

// ModelConfig::from_json wants a CausalLM architecture; drafters name their own class.
ModelConfig layer_config(json j, const std::string& src) {
  std::string type = j.value("model_type", std::string());
  if (type.empty() && j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    const std::string a = j["architectures"][0].get<std::string>();
    if (a.find("Llama") != std::string::npos || a.find("Eagle") != std::string::npos) type = "llama";
    else type = "qwen3";
  }
  if (type == "qwen3") j["architectures"] = {"Qwen3ForCausalLM"};
  else if (type == "llama") j["architectures"] = {"LlamaForCausalLM"};
  else fail(src, ": field 'model_type' must be qwen3 or llama for the draft layers, got '", type, "'");
  return ModelConfig::from_json(j, src);
}

std::vector<int> int_list(const json& j, const char* key, const std::string& src) {
  if (!j.contains(key)) fail(src, ": missing field '", key, "'");
  const json& v = j[key];
  if (!v.is_array() || v.empty()) fail(src, ": field '", key, "' must be a non-empty list of integers");
  std::vector<int> out;
  for (const json& x : v) {
    if (!x.is_number_integer()) fail(src, ": field '", key, "' must hold integers");
    out.push_back(x.get<int>());
  }
  return out;
}

int int_field(const json& j, const char* key, const std::string& src, int dflt, bool required) {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) fail(src, ": missing field '", key, "'");
    return dflt;
  }
  if (!j[key].is_number_integer()) fail(src, ": field '", key, "' must be an integer, got ", j[key].dump());
  return j[key].get<int>();
}

// "sliding_window": a positive integer, or null / absent (none); HF configs that carry one with
// "use_sliding_window": false do not use it.
int window_field(const json& j, const std::string& src) {
  if (!j.contains("sliding_window") || j["sliding_window"].is_null()) return 0;
  if (j.contains("use_sliding_window") && j["use_sliding_window"].is_boolean() &&
      !j["use_sliding_window"].get<bool>())
    return 0;
  const json& w = j["sliding_window"];
  if (!w.is_number_integer() || w.get<int64_t>() < 1 || w.get<int64_t>() > INT32_MAX)
    fail(src, ": field 'sliding_window' must be a positive integer or null, got ", w.dump());
  return w.get<int>();
}

bool bool_field(const json& j, const char* key, const std::string& src, bool dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_boolean()) fail(src, ": field '", key, "' must be true or false, got ", j[key].dump());
  return j[key].get<bool>();
}

void read_markov(DrafterConfig& c, const json& j, const std::string& src) {
  c.markov_rank = int_field(j, "markov_rank", src, 0, false);
  c.markov_head_type = j.value("markov_head_type", std::string("vanilla"));
  if (c.markov_head_type != "vanilla" && c.markov_head_type != "gated" && c.markov_head_type != "rnn")
    fail(src, ": field 'markov_head_type' must be vanilla, gated or rnn, got '", c.markov_head_type, "'");
  c.confidence_head = bool_field(j, "enable_confidence_head", src, false);
  c.confidence_with_markov = bool_field(j, "confidence_head_with_markov", src, c.markov_rank > 0);
  if (c.markov_rank < 0) fail(src, ": field 'markov_rank' must be >= 0");
  if (c.confidence_with_markov && c.confidence_head && c.markov_rank == 0)
    fail(src, ": 'confidence_head_with_markov' needs a Markov head ('markov_rank' > 0)");
  if (j.contains("sts_temperatures")) {
    const json& t = j["sts_temperatures"];
    if (!t.is_array()) fail(src, ": field 'sts_temperatures' must be a list of numbers");
    for (const json& x : t) {
      if (!x.is_number() || !(x.get<double>() > 0)) fail(src, ": field 'sts_temperatures' must hold positive numbers");
      c.sts_temperatures.push_back(x.get<float>());
    }
  }
}

}  // namespace

DrafterConfig DrafterConfig::load(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  if (!std::filesystem::exists(path)) fail(dir, ": no config.json in the drafter directory");
  json j = json::parse(read_text_file(path), nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(path, ": malformed JSON");
  DrafterConfig c;
  c.path = path;
  if (j.contains("speculators_model_type")) {
    // vLLM Speculators wrapper: the draft layers live in transformer_layer_config and the
    // aux layer ids count the input of layer i (= output of layer i - 1).
    c.format = "speculators";
    const std::string type = j["speculators_model_type"].is_string() ? j["speculators_model_type"].get<std::string>() : "";
    if (type == "dspark") c.method = SpecMethod::DSpark;
    else if (type == "dflash") c.method = SpecMethod::DFlash;
    else if (type == "eagle3") c.method = SpecMethod::Eagle3;
    else fail(path, ": field 'speculators_model_type' is '", type, "'; supported: dspark, dflash, eagle3");
    if (!j.contains("transformer_layer_config") || !j["transformer_layer_config"].is_object())
      fail(path, ": missing object field 'transformer_layer_config'");
    c.layers = layer_config(j["transformer_layer_config"], path + " (transformer_layer_config)");
    const char* ids_key = c.method == SpecMethod::Eagle3 && j.contains("eagle_aux_hidden_state_layer_ids")
                              ? "eagle_aux_hidden_state_layer_ids"
                              : "aux_hidden_state_layer_ids";
    for (int id : int_list(j, ids_key, path)) c.target_layer_ids.push_back(id - 1);
    if (j.contains("speculators_config") && j["speculators_config"].contains("proposal_methods")) {
      const json& pm = j["speculators_config"]["proposal_methods"];
      if (pm.is_array() && !pm.empty() && pm[0].contains("speculative_tokens") && pm[0]["speculative_tokens"].is_number_integer())
        c.speculative_tokens = pm[0]["speculative_tokens"].get<int>();
    }
    c.draft_vocab_size = int_field(j, "draft_vocab_size", path, 0, false);
    c.sliding_window = window_field(j, path);
    if (c.method == SpecMethod::Eagle3) {
      c.norm_before_residual = bool_field(j, "norm_before_residual", path, true);
    } else {
      c.block_size = int_field(j, "block_size", path, 0, true);
      c.mask_token_id = int_field(j, "mask_token_id", path, 0, true);
      const bool from_anchor = bool_field(j, "sample_from_anchor", path, c.method == SpecMethod::DSpark);
      if (from_anchor != (c.method == SpecMethod::DSpark))
        fail(path, ": field 'sample_from_anchor' must be ", c.method == SpecMethod::DSpark ? "true" : "false", " for ",
             spec_method_name(c.method));
      if (c.method == SpecMethod::DSpark) read_markov(c, j, path);
    }
  } else {
    std::string arch;
    if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
        j["architectures"][0].is_string())
      arch = j["architectures"][0].get<std::string>();
    const bool zlab = arch == "DFlashDraftModel";
    const bool dspark = arch == "Qwen3DSparkModel" || arch == "DSparkDraftModel" || arch == "LlamaDSparkModel";
    if (!zlab && !dspark)
      fail(path, ": unsupported drafter architecture '", arch,
           "' (supported: Qwen3DSparkModel, DSparkDraftModel, DFlashDraftModel, or a Speculators config)");
    c.method = zlab ? SpecMethod::DFlash : SpecMethod::DSpark;
    c.format = zlab ? "zlab" : "deepspec";
    c.layers = layer_config(j, path);
    // Fields may sit at the top level (DeepSpec) or under dflash_config (z-lab, some exports).
    json f = j;
    if (j.contains("dflash_config") && j["dflash_config"].is_object())
      for (auto it = j["dflash_config"].begin(); it != j["dflash_config"].end(); ++it) f[it.key()] = it.value();
    c.target_layer_ids = int_list(f, "target_layer_ids", path);
    c.block_size = int_field(f, "block_size", path, 0, true);
    c.mask_token_id = int_field(f, "mask_token_id", path, 0, true);
    c.num_target_layers = int_field(f, "num_target_layers", path, 0, false);
    c.draft_vocab_size = int_field(f, "draft_vocab_size", path, 0, false);
    c.sliding_window = window_field(f, path);
    if (dspark) read_markov(c, f, path);
  }
  if (c.method != SpecMethod::Eagle3) {
    if (c.block_size < 1 || c.block_size > 64) fail(path, ": field 'block_size' must be between 1 and 64, got ", c.block_size);
    if (c.method == SpecMethod::DFlash && c.block_size < 2) fail(path, ": field 'block_size' must be at least 2 for DFlash");
    if (c.mask_token_id < 0) fail(path, ": field 'mask_token_id' must be >= 0");
    if (!c.sts_temperatures.empty() && c.sts_temperatures.size() != size_t(c.block_size))
      fail(path, ": field 'sts_temperatures' has ", c.sts_temperatures.size(), " entries but the block has ", c.block_size,
           " draft positions (block_size); recalibrate with dspark calibrate");
  }
  if (c.target_layer_ids.empty()) fail(path, ": the drafter names no target layers");
  if (c.draft_vocab_size < 0) fail(path, ": field 'draft_vocab_size' must be >= 0, got ", c.draft_vocab_size);
  return c;
}

json DrafterConfig::to_deepspec_json() const {
  json j = layers.to_json();
  j["architectures"] = {method == SpecMethod::DFlash ? "DFlashDraftModel" : "Qwen3DSparkModel"};
  j["block_size"] = block_size;
  j["target_layer_ids"] = target_layer_ids;
  j["mask_token_id"] = mask_token_id;
  if (num_target_layers) j["num_target_layers"] = num_target_layers;
  if (draft_vocab_size) j["draft_vocab_size"] = draft_vocab_size;
  if (sliding_window) j["sliding_window"] = sliding_window;
  j["tie_word_embeddings"] = false;
  if (method == SpecMethod::DSpark) {
    j["markov_rank"] = markov_rank;
    j["markov_head_type"] = markov_head_type;
    j["enable_confidence_head"] = confidence_head;
    j["confidence_head_with_markov"] = confidence_with_markov;
    if (!sts_temperatures.empty()) j["sts_temperatures"] = sts_temperatures;
  } else {
    j["dflash_config"] = {{"mask_token_id", mask_token_id}, {"target_layer_ids", target_layer_ids}};
  }
  return j;
}

}  // namespace dspark

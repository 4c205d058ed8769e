#include "spec_decode/spec_config.h"

#include "core/gguf.h"
#include "kernels/quant.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dspark {

using json = nlohmann::json;

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::DSpark: return "dspark";
    case SpecMethod::DFlash: return "dflash";
    case SpecMethod::Eagle3: return "eagle3";
    case SpecMethod::Ngram: return "ngram";
  }
  return "?";
}

namespace {

// {"method": "extract_hidden_states", "num_speculative_tokens": 1, "draft_model_config":
// {"hf_config": {"eagle_aux_hidden_state_layer_ids": [...]}}}, as vLLM takes it.
SpecConfig parse_extract(const json& j, const std::string& where) {
  SpecConfig c;
  c.extract_hidden_states = true;
  c.method_given = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "method") continue;
    if (k == "num_speculative_tokens") {
      if (it.value() != 1)
        fail(where, ": field 'num_speculative_tokens' must be 1 for method extract_hidden_states, got ",
             it.value().dump());
    } else if (k == "draft_model_config") {
      const json& d = it.value();
      const json* ids = nullptr;
      if (d.is_object() && d.contains("hf_config") && d["hf_config"].is_object() &&
          d["hf_config"].contains("eagle_aux_hidden_state_layer_ids"))
        ids = &d["hf_config"]["eagle_aux_hidden_state_layer_ids"];
      if (!ids || !ids->is_array() || ids->empty())
        fail(where, ": field 'draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids' must be a "
             "non-empty array of layer ids, got ", d.dump());
      for (const json& v : *ids) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 4096)
          fail(where, ": field 'eagle_aux_hidden_state_layer_ids' holds ", v.dump(),
               "; layer ids are integers from 0 (the embeddings) to num_hidden_layers");
        c.aux_layer_ids.push_back(v.get<int>());
      }
    } else {
      fail(where, ": unknown field '", k, "' for method extract_hidden_states (supported: method, "
           "num_speculative_tokens, draft_model_config)");
    }
  }
  if (c.aux_layer_ids.empty())
    fail(where, ": method extract_hidden_states needs "
         "draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids");
  return c;
}

}  // namespace

SpecConfig SpecConfig::parse(const std::string& text) {
  const std::string where = "--speculative-config";
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(where, ": expected a JSON object, got: ", text);
  SpecConfig c;
  bool has_method = false;
  auto str = [&](const char* key) {
    const json& v = j[key];
    if (!v.is_string()) fail(where, ": field '", key, "' must be a string, got ", v.dump());
    return v.get<std::string>();
  };
  auto integer = [&](const char* key) {
    const json& v = j[key];
    if (!v.is_number_integer()) fail(where, ": field '", key, "' must be an integer, got ", v.dump());
    return v.get<int64_t>();
  };
  if (j.contains("method") && j["method"] == "extract_hidden_states") return parse_extract(j, where);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "method") {
      const std::string m = str("method");
      has_method = true;
      if (m == "dspark") c.method = SpecMethod::DSpark;
      else if (m == "dflash") c.method = SpecMethod::DFlash;
      else if (m == "eagle3") c.method = SpecMethod::Eagle3;
      else if (m == "ngram") c.method = SpecMethod::Ngram;
      else fail(where, ": field 'method' is '", m, "'; supported: dspark, dflash, eagle3, ngram, extract_hidden_states");
    } else if (k == "model") {
      c.model = str("model");
    } else if (k == "num_speculative_tokens") {
      const int64_t n = integer("num_speculative_tokens");
      if (n <= 0 || n > 64) fail(where, ": field 'num_speculative_tokens' must be between 1 and 64, got ", n);
      c.num_speculative_tokens = int(n);
    } else if (k == "draft_sample_method") {
      const std::string m = str("draft_sample_method");
      if (m == "greedy") c.draft_sample = DraftSampleMethod::Greedy;
      else if (m == "probabilistic") c.draft_sample = DraftSampleMethod::Probabilistic;
      else fail(where, ": field 'draft_sample_method' is '", m, "'; supported: greedy, probabilistic");
    } else if (k == "rejection_sample_method") {
      const std::string m = str("rejection_sample_method");
      if (m == "standard") c.rejection = RejectionMethod::Standard;
      else if (m == "block") c.rejection = RejectionMethod::Block;
      else fail(where, ": field 'rejection_sample_method' is '", m, "'; supported: standard, block");
    } else if (k == "prompt_lookup_min" || k == "prompt_lookup_max") {
      const int64_t n = integer(k.c_str());
      if (n <= 0 || n > 64) fail(where, ": field '", k, "' must be between 1 and 64, got ", n);
      (k == "prompt_lookup_min" ? c.prompt_lookup_min : c.prompt_lookup_max) = int(n);
    } else if (k == "dspark_confidence_threshold") {
      const json& v = j[k];
      if (!v.is_number() || v.get<double>() < 0 || v.get<double>() >= 1)
        fail(where, ": field 'dspark_confidence_threshold' must be a number in [0, 1), got ", v.dump());
      c.confidence_threshold = v.get<float>();
    } else if (k == "enable_adaptive_verification") {
      const json& v = j[k];
      if (!v.is_boolean()) fail(where, ": field 'enable_adaptive_verification' must be true or false, got ", v.dump());
      c.adaptive_verification = v.get<bool>();
    } else if (k == "dspark_sps_curve") {
      json v = j[k];
      if (v.is_string() && v.get<std::string>() == "auto") continue;
      std::string src = where;
      if (v.is_string()) {  // a file written by `dspark bench step --sps-out`
        src = v.get<std::string>();
        std::ifstream in(src);
        if (!in) fail(where, ": field 'dspark_sps_curve': cannot read the file '", src, "'");
        json f = json::parse(in, nullptr, false);
        if (f.is_discarded() || !f.is_object() || !f.contains("dspark_sps_curve"))
          fail(src, ": not a JSON object with a 'dspark_sps_curve' array (write it with dspark bench step --sps-out)");
        v = f["dspark_sps_curve"];
        c.sps_curve_origin.file = src;
        for (auto [key, out] : {std::pair<const char*, std::string*>{"cpu", &c.sps_curve_origin.cpu},
                                {"gemm", &c.sps_curve_origin.gemm},
                                {"dtype", &c.sps_curve_origin.dtype}})
          if (f.contains(key) && f[key].is_string()) *out = f[key].get<std::string>();
        if (f.contains("threads") && f["threads"].is_number_integer())
          c.sps_curve_origin.threads = f["threads"].get<int>();
      }
      if (!v.is_array() || v.empty())
        fail(src, ": field 'dspark_sps_curve' must be \"auto\", a file name or a non-empty array of steps per "
             "second at 1, 2, ... tokens per step, got ", v.dump());
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_number() || !(v[i].get<double>() > 0))
          fail(src, ": field 'dspark_sps_curve' entry ", i, " must be a positive number, got ", v[i].dump());
        c.sps_curve.push_back(v[i].get<double>());
      }
    } else if (k == "quantization") {
      if (j[k].is_null()) continue;  // vLLM's default: none
      const std::string q = str("quantization");
      const auto t = ggml_type_from_name(q);
      if (q != "int8" && !(t && can_quantize(*t)))
        fail(where, ": field 'quantization' is '", q,
             "'; supported: int8 (weight-only, per row), q8_0, q4_0, q5_0, q4_k (llama.cpp's block formats)");
      c.quantization = q;
    } else {
      fail(where, ": unknown field '", k,
           "' (supported: method, model, num_speculative_tokens, draft_sample_method, rejection_sample_method, "
           "prompt_lookup_min, prompt_lookup_max, dspark_confidence_threshold, enable_adaptive_verification, "
           "dspark_sps_curve, quantization)");
    }
  }
  if (!has_method && c.model.empty()) fail(where, ": give 'method' (or 'model', whose config names the method)");
  c.method_given = has_method;
  if (!has_method) c.method = SpecMethod::DSpark;  // refined from the drafter's config by the loader
  if (c.method == SpecMethod::Ngram) {
    if (!c.model.empty() && c.model != "ngram") fail(where, ": field 'model' must be absent (or \"ngram\") for method ngram");
    if (c.draft_sample == DraftSampleMethod::Probabilistic)
      fail(where, ": field 'draft_sample_method' cannot be probabilistic for method ngram (it has no draft distribution)");
    if (c.num_speculative_tokens == 0) fail(where, ": field 'num_speculative_tokens' is required for method ngram");
    if (c.prompt_lookup_min == 0 && c.prompt_lookup_max == 0) c.prompt_lookup_min = c.prompt_lookup_max = 5;
    if (c.prompt_lookup_min == 0) c.prompt_lookup_min = c.prompt_lookup_max;
    if (c.prompt_lookup_max == 0) c.prompt_lookup_max = c.prompt_lookup_min;
    if (!c.quantization.empty()) fail(where, ": field 'quantization' does not apply to method ngram (it has no weights)");
    if (c.prompt_lookup_min > c.prompt_lookup_max)
      fail(where, ": field 'prompt_lookup_min' (", c.prompt_lookup_min, ") exceeds 'prompt_lookup_max' (", c.prompt_lookup_max, ")");
  } else {
    if (c.model.empty()) fail(where, ": field 'model' (the drafter directory) is required for method ", spec_method_name(c.method));
    if (!std::filesystem::is_directory(c.model)) fail(where, ": field 'model': ", c.model, " is not a directory");
    if (c.prompt_lookup_min || c.prompt_lookup_max)
      fail(where, ": fields 'prompt_lookup_min'/'prompt_lookup_max' apply only to method ngram");
  }
  if (c.confidence_threshold > 0 && has_method && c.method != SpecMethod::DSpark)
    fail(where, ": field 'dspark_confidence_threshold' applies only to method dspark");
  if (c.adaptive_verification && has_method && c.method != SpecMethod::DSpark)
    fail(where, ": field 'enable_adaptive_verification' applies only to method dspark (it needs the confidence head)");
  if (c.adaptive_verification && c.confidence_threshold > 0)
    fail(where, ": fields 'enable_adaptive_verification' and 'dspark_confidence_threshold' exclude each other "
         "(the adaptive length policy chooses the lengths itself)");
  if (j.contains("dspark_sps_curve") && !c.adaptive_verification)
    fail(where, ": field 'dspark_sps_curve' needs 'enable_adaptive_verification': true");
  return c;
}

}  // namespace dspark

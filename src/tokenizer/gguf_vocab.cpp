#include "tokenizer/gguf_vocab.h"

#include <string>

#include "core/error.h"

namespace dspark::tokenizer_detail {

namespace {

using json = nlohmann::json;

// llama.cpp's token types (llama_token_type).
enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

constexpr const char* kQwen2Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr const char* kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", use_regex}};
}

json split_then_bytes(const char* regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           json::array({{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                        byte_level(false)})}};
}

}  // namespace

json tokenizer_json_from_gguf(const GgufFile& f) {
  const std::string model = f.str("tokenizer.ggml.model");
  if (model != "gpt2")
    fail(f.path(), ": key 'tokenizer.ggml.model' is '", model, "' (dspark reads byte-level BPE tokenizers, 'gpt2')");
  const std::vector<std::string>& tokens = f.strings("tokenizer.ggml.tokens");
  const std::vector<std::string>& merges = f.strings("tokenizer.ggml.merges");
  std::vector<int64_t> types(tokens.size(), kNormal);
  if (f.find("tokenizer.ggml.token_type")) {
    types = f.integers("tokenizer.ggml.token_type");
    if (types.size() != tokens.size())
      fail(f.path(), ": key 'tokenizer.ggml.token_type' has ", types.size(), " entries for ", tokens.size(), " tokens");
  }
  const std::string pre = f.str("tokenizer.ggml.pre");
  json root;
  bool ignore_merges = false;
  if (pre == "qwen2") {
    root["pre_tokenizer"] = split_then_bytes(kQwen2Split);
  } else if (pre == "llama-bpe" || pre == "llama3") {
    root["pre_tokenizer"] = split_then_bytes(kLlama3Split);
    ignore_merges = true;  // as Llama 3's tokenizer.json (and llama.cpp for this pre-tokenizer)
  } else if (pre == "gpt-2" || pre == "default") {
    root["pre_tokenizer"] = byte_level(true);
  } else {
    fail(f.path(), ": key 'tokenizer.ggml.pre' is '", pre, "' (dspark knows qwen2, llama-bpe, llama3, gpt-2, default)");
  }
  json vocab = json::object();
  json added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int64_t t = types[id];
    if (t < kNormal || t > kByte) fail(f.path(), ": key 'tokenizer.ggml.token_type'[", id, "] is ", t, " (1 to 6)");
    if (t == kControl || t == kUserDefined) {
      added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", t == kUserDefined}, {"special", t == kControl}});
    } else if (!vocab.emplace(tokens[id], id).second) {
      fail(f.path(), ": key 'tokenizer.ggml.tokens' holds '", tokens[id], "' twice");
    }
  }
  root["model"] = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", merges}, {"ignore_merges", ignore_merges},
                   {"byte_fallback", false}};
  root["added_tokens"] = std::move(added);
  root["decoder"] = byte_level(true);
  const GgufValue* add_bos = f.find("tokenizer.ggml.add_bos_token");
  if (add_bos && add_bos->type == GgufValueType::BOOL && add_bos->integer) {
    const int64_t bos = f.integer("tokenizer.ggml.bos_token_id");
    if (bos < 0 || size_t(bos) >= tokens.size())
      fail(f.path(), ": key 'tokenizer.ggml.bos_token_id' is ", bos, ", outside the ", tokens.size(), " tokens");
    root["post_processor"] = {{"type", "TemplateProcessing"},
                              {"single", json::array({{{"SpecialToken", {{"id", tokens[size_t(bos)]}, {"type_id", 0}}}},
                                                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                              {"special_tokens", {{tokens[size_t(bos)], {{"id", tokens[size_t(bos)]}, {"ids", {bos}}}}}}};
  }
  return root;
}

}  // namespace dspark::tokenizer_detail

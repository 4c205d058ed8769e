#include "datagen/prompts.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap_file.h"

namespace dspark::datagen {

namespace {

nlohmann::json parse_line(std::string_view line, const std::string& path, int64_t number) {
  try {
    return nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ":", number, ": not valid JSON (", e.what(), ")");
  }
}

}  // namespace

std::optional<std::string> chatml_first_user_turn(std::string_view text) {
  static constexpr std::string_view kStart = "<|im_start|>user\n";
  static constexpr std::string_view kEnd = "<|im_end|>";
  const size_t a = text.find(kStart);
  if (a == std::string_view::npos) return std::nullopt;
  const size_t from = a + kStart.size();
  const size_t b = text.find(kEnd, from);
  if (b == std::string_view::npos) return std::nullopt;
  return std::string(text.substr(from, b - from));
}

std::vector<RegenPrompt> load_corpus_prompts(const std::string& corpus_dir, const std::string& split) {
  const std::string path = corpus_dir + "/instructions/" + split + ".jsonl";
  const std::string text = read_text_file(path);
  std::vector<RegenPrompt> out;
  for_each_line(text, [&](std::string_view line, int64_t number) {
    const nlohmann::json j = parse_line(line, path, number);
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      fail(path, ":", number, ": expected an object with a \"text\" string");
    auto user = chatml_first_user_turn(j["text"].get_ref<const std::string&>());
    if (!user) fail(path, ":", number, ": the text has no ChatML user turn (<|im_start|>user ... <|im_end|>)");
    RegenPrompt p;
    p.id = int64_t(out.size());
    p.turns.push_back(std::move(*user));
    out.push_back(std::move(p));
  });
  if (out.empty()) fail(path, ": holds no instructions");
  return out;
}

std::vector<RegenPrompt> load_prompt_file(const std::string& path) {
  const std::string text = read_text_file(path);
  std::vector<RegenPrompt> out;
  for_each_line(text, [&](std::string_view line, int64_t number) {
    const nlohmann::json j = parse_line(line, path, number);
    if (!j.is_object()) fail(path, ":", number, ": expected a JSON object");
    RegenPrompt p;
    p.id = int64_t(out.size());
    const bool has_prompt = j.contains("prompt"), has_turns = j.contains("turns");
    if (has_prompt == has_turns) fail(path, ":", number, ": expected exactly one of \"prompt\" and \"turns\"");
    if (has_prompt) {
      if (!j["prompt"].is_string()) fail(path, ":", number, ": \"prompt\" must be a string");
      p.turns.push_back(j["prompt"].get<std::string>());
    } else {
      const auto& t = j["turns"];
      if (!t.is_array() || t.empty()) fail(path, ":", number, ": \"turns\" must be a non-empty list of strings");
      for (const auto& x : t) {
        if (!x.is_string()) fail(path, ":", number, ": \"turns\" must be a non-empty list of strings");
        p.turns.push_back(x.get<std::string>());
      }
    }
    if (j.contains("system")) {
      if (!j["system"].is_string()) fail(path, ":", number, ": \"system\" must be a string");
      p.system = j["system"].get<std::string>();
    }
    out.push_back(std::move(p));
  });
  if (out.empty()) fail(path, ": holds no prompts");
  return out;
}

std::vector<RegenPrompt> spread_sample(std::vector<RegenPrompt> all, int64_t n) {
  if (n < 1) fail("a prompt sample must hold at least 1 prompt, not ", n);
  const int64_t size = int64_t(all.size());
  if (n >= size) return all;
  std::vector<RegenPrompt> out;
  out.reserve(size_t(n));
  // i * size / n in 128 bits: no overflow for any 64-bit sizes.
  for (int64_t i = 0; i < n; ++i) out.push_back(std::move(all[size_t((__int128)i * size / n)]));
  return out;
}

}  // namespace dspark::datagen

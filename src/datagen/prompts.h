// Prompts for response regeneration: the user turns of the corpus' ChatML instructions, or a
// JSONL file of {"prompt": "..."} / {"turns": ["...", ...]} records.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dspark::datagen {

struct RegenPrompt {
  int64_t id = 0;                  // index of the prompt in its source (0-based record number)
  std::string system;              // optional system message ("" for none)
  std::vector<std::string> turns;  // user turns; the target answers each in order
};

// Calls f(line, line_number) for each non-empty line of a text file (a trailing \r cut off;
// line numbers count every line, from 1): the JSONL readers of datagen share it.
template <class F>
void for_each_line(const std::string& text, F&& f) {
  size_t pos = 0;
  int64_t number = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++number;
    std::string_view line(text.data() + pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) f(line, number);
    pos = end + 1;
  }
}

// The content of the first "<|im_start|>user\n ... <|im_end|>" of a ChatML text, if any.
std::optional<std::string> chatml_first_user_turn(std::string_view text);

// DIR/instructions/<split>.jsonl: one prompt per {"text": ChatML} line, its first user turn.
// Errors name the file and line (a line without a user turn is an error).
std::vector<RegenPrompt> load_corpus_prompts(const std::string& corpus_dir, const std::string& split);

// A JSONL file, one object per line with "prompt" (a string) or "turns" (a list of strings),
// and optionally "system" (a string). Blank lines are skipped and not counted.
std::vector<RegenPrompt> load_prompt_file(const std::string& path);

// `n` prompts spread evenly over `all`: all[floor(i * size / n)] for i < n, ids kept (so a rerun
// with the same n resumes). A source file is often grouped by kind (a corpus writes its
// translation turns, then its math, ...), so its first n prompts can be a skewed sample; these are
// not. All of them when n >= size.
std::vector<RegenPrompt> spread_sample(std::vector<RegenPrompt> all, int64_t n);

}  // namespace dspark::datagen

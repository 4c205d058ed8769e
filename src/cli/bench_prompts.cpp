#include "cli/bench_prompts.h"

#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap_file.h"

namespace dspark {

std::vector<BenchPrompt> read_prompts(const std::string& path, int limit) {
  std::vector<BenchPrompt> out;
  std::string text = read_text_file(path);
  size_t line_no = 0, start = 0;
  while (start < text.size() && (limit <= 0 || int(out.size()) < limit)) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail(path, ":", line_no, ": malformed JSON line");
    BenchPrompt p;
    if (j.contains("turns") && j["turns"].is_array() && !j["turns"].empty() &&
        j["turns"][0].is_string()) {
      p.text = j["turns"][0].get<std::string>();
      p.category = j.value("category", std::string("all"));
      if (j.contains("question_id")) p.question_id = j["question_id"];
    } else if (j.contains("prompt") && j["prompt"].is_string()) {
      p.text = j["prompt"].get<std::string>();
      p.category = j.value("domain", j.value("category", std::string("all")));
    } else {
      fail(path, ":", line_no, ": expected a 'turns' list or a 'prompt' string");
    }
    out.push_back(std::move(p));
  }
  if (out.empty()) fail(path, ": no prompts");
  return out;
}

std::vector<BenchPrompt> first_per_category(std::vector<BenchPrompt> prompts, int per_category) {
  if (per_category <= 0) return prompts;
  std::map<std::string, int> taken;
  std::vector<BenchPrompt> out;
  for (BenchPrompt& p : prompts)
    if (taken[p.category]++ < per_category) out.push_back(std::move(p));
  return out;
}

}  // namespace dspark

// Contamination check: does a training prompt share a long word n-gram with an evaluation set?
// Words are runs of ASCII letters and digits (lower-cased) or of non-ASCII bytes; everything
// else separates them, so punctuation and spacing do not hide a copy.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dspark::datagen {

std::vector<std::string> ngram_words(std::string_view text);

class NgramIndex {
 public:
  explicit NgramIndex(int n);
  int n() const { return n_; }
  // Adds every n-gram of `text`, remembering `label` (e.g. "spec_bench.jsonl:17") for reports.
  void add(std::string_view text, const std::string& label);
  // The first n-gram of `text` that the index holds: its words and the label it came from.
  bool find(std::string_view text, std::string* ngram, std::string* label) const;
  size_t size() const { return grams_.size(); }

 private:
  int n_;
  std::vector<std::string> labels_;
  std::unordered_map<uint64_t, uint32_t> grams_;  // n-gram hash -> label index
};

// Every string of an evaluation JSONL file (MT-Bench / Spec-Bench: "turns" and "reference"; any
// other string field too), added with "FILE:LINE" labels. Errors name the file and line.
void add_eval_file(NgramIndex& index, const std::string& path);

}  // namespace dspark::datagen

#include "datagen/ngram_overlap.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap_file.h"
#include "data/text_util.h"
#include "datagen/prompts.h"

namespace dspark::datagen {

std::vector<std::string> ngram_words(std::string_view text) {
  std::vector<std::string> w;
  std::string cur;
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')) {
      cur += ch;
    } else if (c >= 'A' && c <= 'Z') {
      cur += char(c - 'A' + 'a');
    } else if (!cur.empty()) {
      w.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) w.push_back(std::move(cur));
  return w;
}

namespace {

uint64_t gram_hash(const std::vector<std::string>& w, size_t at, int n) {
  uint64_t h = 0x6e6772616d73ull;
  for (int i = 0; i < n; ++i) h = data::mix64(h ^ data::hash64(w[at + size_t(i)]));
  return h;
}

std::string gram_text(const std::vector<std::string>& w, size_t at, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? " " : "") + w[at + size_t(i)];
  return s;
}

void add_strings(NgramIndex& index, const nlohmann::json& j, const std::string& label) {
  if (j.is_string()) {
    index.add(j.get_ref<const std::string&>(), label);
  } else if (j.is_array() || j.is_object()) {
    for (const auto& x : j) add_strings(index, x, label);
  }
}

}  // namespace

NgramIndex::NgramIndex(int n) : n_(n) {
  if (n < 3) fail("n-gram overlap: n must be at least 3, not ", n);
}

void NgramIndex::add(std::string_view text, const std::string& label) {
  const std::vector<std::string> w = ngram_words(text);
  if (w.size() < size_t(n_)) return;
  if (labels_.empty() || labels_.back() != label) labels_.push_back(label);
  for (size_t i = 0; i + size_t(n_) <= w.size(); ++i)
    grams_.emplace(gram_hash(w, i, n_), uint32_t(labels_.size() - 1));
}

bool NgramIndex::find(std::string_view text, std::string* ngram, std::string* label) const {
  const std::vector<std::string> w = ngram_words(text);
  for (size_t i = 0; i + size_t(n_) <= w.size(); ++i) {
    auto it = grams_.find(gram_hash(w, i, n_));
    if (it == grams_.end()) continue;
    if (ngram) *ngram = gram_text(w, i, n_);
    if (label) *label = labels_[it->second];
    return true;
  }
  return false;
}

void add_eval_file(NgramIndex& index, const std::string& path) {
  const std::string text = read_text_file(path);
  for_each_line(text, [&](std::string_view l, int64_t line) {
    if (data::trim(l).empty()) return;
    nlohmann::json j = nlohmann::json::parse(l, nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail(path, ":", line, ": not a JSON object");
    add_strings(index, j, path + ":" + std::to_string(line));
  });
}

}  // namespace dspark::datagen

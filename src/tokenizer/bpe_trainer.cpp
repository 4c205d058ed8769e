// Byte-level BPE training (see bpe_trainer.h for the pipeline).
//
// Counting: inputs are memory-mapped and cut into chunks at places where the Qwen2 regex is
// known to restart (a '\n' followed by a printable ASCII character, or a JSONL line end), so
// counting a file chunk by chunk gives exactly the pieces Tokenizer::encode would produce for
// the whole text. Chunks are counted in parallel into one map per task; the maps are summed
// and sorted, so the result does not depend on the number of threads.
//
// Merging (the algorithm of HF tokenizers' BpeTrainer): words are symbol-id sequences in one
// arena, rewritten in place by each merge. pair_count holds the frequency of every adjacent
// pair, pair_words the words that (may) hold it. A max-heap orders (count, pair); entries go
// stale when a count drops and are re-pushed with the current count when they reach the top;
// pairs whose count grows (only pairs involving the new token) get a fresh entry.
#include "tokenizer/bpe_trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/mmap_file.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "tokenizer/js_regex.h"
#include "tokenizer/unicode_util.h"

namespace dspark {

namespace td = tokenizer_detail;
namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

const char* const kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

// ---------------------------------------------------------------------------------------------
// GPT-2 bytes_to_unicode (td::bytelevel_printable). Ids of the base vocabulary follow its list
// order: the printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF (ids 0..187), then the others in
// byte order.
struct ByteAlphabet {
  uint8_t id_to_byte[256];
  int32_t byte_to_id[256];
  ByteAlphabet() {
    uint32_t id = 0;
    for (uint32_t b = 0; b < 256; ++b)
      if (td::bytelevel_printable(b)) id_to_byte[id++] = static_cast<uint8_t>(b);
    for (uint32_t b = 0; b < 256; ++b)
      if (!td::bytelevel_printable(b)) id_to_byte[id++] = static_cast<uint8_t>(b);
    for (uint32_t i = 0; i < 256; ++i) byte_to_id[id_to_byte[i]] = static_cast<int32_t>(i);
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

constexpr const char* kSpecials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"};

// ---------------------------------------------------------------------------------------------
// Counting

using WordMap = std::unordered_map<std::string, int64_t>;

struct TaskCounts {
  WordMap words;
  int64_t bytes = 0, documents = 0, pretokens = 0, specials = 0;
};

class PreTokenizer {
 public:
  explicit PreTokenizer(std::vector<std::string> added)
      : regex_(kQwen2SplitPattern), added_(std::move(added)) {}

  // Counts the pieces of one text (a document, or a chunk cut at a safe place).
  void count(std::string_view text, TaskCounts& out) const {
    std::string clean;
    if (!td::is_valid_utf8(text)) {  // as encode does: ill-formed input reads as U+FFFD
      clean = td::utf8_sanitize(text);
      text = clean;
    }
    size_t start = 0, i = 0;
    while ((i = text.find("<|", i)) != std::string_view::npos) {
      size_t len = 0;  // longest added token at i (all of them start with "<|")
      for (const std::string& a : added_)
        if (a.size() > len && text.compare(i, a.size(), a) == 0) len = a.size();
      if (len == 0) {
        ++i;
        continue;
      }
      count_segment(text.substr(start, i - start), out);
      ++out.specials;
      i += len;
      start = i;
    }
    count_segment(text.substr(start), out);
  }

 private:
  // Split(Isolated): matches and the text between them (the pattern leaves none) are pieces.
  void count_segment(std::string_view seg, TaskCounts& out) const {
    if (seg.empty()) return;
    size_t prev = 0;
    auto add = [&](size_t b, size_t e) {
      if (e <= b) return;
      ++out.words[std::string(seg.substr(b, e - b))];
      ++out.pretokens;
    };
    for (auto [b, e] : regex_.find_all(seg)) {
      if (e == b) continue;
      add(prev, b);
      add(b, e);
      prev = e;
    }
    add(prev, seg.size());
  }

  td::JsRegex regex_;
  std::vector<std::string> added_;
};

// A place where a chunk may end: the regex never matches across it and never looks past it.
// JSONL: after a line. Text: between a '\n' and a printable ASCII character (no regex match
// holds both a newline and a following non-space character, and a whitespace run that ends
// with '\n' is always taken whole by \s*[\r\n]+ before \s+(?!\S) is tried).
bool is_cut(std::string_view s, size_t p, bool jsonl) {
  if (p == 0 || p >= s.size()) return true;
  if (s[p - 1] != '\n') return false;
  return jsonl || (s[p] >= 0x21 && s[p] <= 0x7E);
}

// The first cut at or after p (s.size() if none).
size_t next_cut(std::string_view s, size_t p, bool jsonl) {
  if (p >= s.size() || is_cut(s, p, jsonl)) return std::min(p, s.size());
  for (size_t q = p;;) {
    const size_t nl = s.find('\n', q);
    if (nl == std::string_view::npos) return s.size();
    if (is_cut(s, nl + 1, jsonl)) return nl + 1;
    q = nl + 1;
  }
}

// The last cut at or before p (0 if none).
size_t prev_cut(std::string_view s, size_t p, bool jsonl) {
  if (p >= s.size() || is_cut(s, p, jsonl)) return std::min(p, s.size());
  for (size_t q = p; q > 0;) {
    const size_t nl = s.rfind('\n', q - 1);
    if (nl == std::string_view::npos) return 0;
    if (is_cut(s, nl + 1, jsonl)) return nl + 1;
    q = nl;
  }
  return 0;
}

struct Source {
  const BpeTrainInput* input;
  std::unique_ptr<MappedFile> file;
  std::string_view data;
  size_t budget = 0;  // bytes of data to read
};

class Counter {
 public:
  Counter(const BpeTrainOptions& o, const std::vector<std::string>& added)
      : opt_(o),
        pre_(added),
        tasks_(o.threads > 0 ? o.threads : std::max(1, num_threads())),
        counts_(static_cast<size_t>(tasks_)) {}

  void run(std::vector<Source>& sources) {
    const double t0 = now_seconds();
    size_t total = 0, done = 0;
    for (const Source& s : sources) total += s.budget;
    double last_report = t0;
    for (Source& s : sources) {
      const bool jsonl = s.input->kind == BpeTrainInput::Kind::JsonlFile;
      std::string_view data = s.data.substr(0, s.budget);
      if (s.budget < s.data.size()) data = data.substr(0, prev_cut(s.data, s.budget, jsonl));
      if (s.input->kind == BpeTrainInput::Kind::Text) {
        // One document: counted as one piece of work (no cuts needed).
        count_chunks(*s.input, {data}, false, 0);
        done += s.budget;
        continue;
      }
      // Blocks of ~64 MB for progress; each cut into pieces for the tasks.
      constexpr size_t kBlock = size_t{64} << 20;
      size_t pos = 0;
      if (s.input->kind == BpeTrainInput::Kind::TextFile && !data.empty()) counts_[0].documents++;
      while (pos < data.size()) {
        const size_t end =
            std::min(data.size(), next_cut(data, std::min(data.size(), pos + kBlock), jsonl));
        const std::string_view block = data.substr(pos, end - pos);
        const size_t piece =
            std::max<size_t>(static_cast<size_t>(std::max<int64_t>(1, opt_.chunk_bytes)),
                             block.size() / (static_cast<size_t>(tasks_) * 8) + 1);
        std::vector<std::string_view> chunks;
        for (size_t b = 0; b < block.size();) {
          const size_t e = next_cut(block, std::min(block.size(), b + piece), jsonl);
          chunks.push_back(block.substr(b, e - b));
          b = e;
        }
        count_chunks(*s.input, chunks, jsonl, pos);
        done += block.size();
        pos = end;
        const double now = now_seconds();
        if (opt_.progress && (now - last_report > 2.0 || done == total)) {
          std::fprintf(stderr, "counting: %.1f / %.1f MB, %.1f s\n",
                       static_cast<double>(done) / 1e6, static_cast<double>(total) / 1e6, now - t0);
          last_report = now;
        }
      }
      done += s.budget - data.size();
    }
  }

  // Sums the task maps; words sorted by their bytes.
  std::vector<std::pair<std::string, int64_t>> words(BpeTrainStats& st) {
    WordMap& all = counts_[0].words;
    for (size_t t = 1; t < counts_.size(); ++t) {
      for (auto& [w, c] : counts_[t].words) all[w] += c;
      counts_[t].words = WordMap();
    }
    for (const TaskCounts& c : counts_) {
      st.input_bytes += c.bytes;
      st.documents += c.documents;
      st.pretokens += c.pretokens;
      st.special_tokens_seen += c.specials;
    }
    std::vector<std::pair<std::string, int64_t>> out(std::make_move_iterator(all.begin()),
                                                     std::make_move_iterator(all.end()));
    all = WordMap();
    std::sort(out.begin(), out.end());
    st.unique_words = static_cast<int64_t>(out.size());
    return out;
  }

 private:
  // Counts chunks in parallel; `base` is the offset of chunk 0's block in the source (errors).
  void count_chunks(const BpeTrainInput& in, const std::vector<std::string_view>& chunks,
                    bool jsonl, size_t base) {
    std::atomic<size_t> next{0};
    std::mutex err_mu;
    std::exception_ptr err;
    const char* origin = chunks.empty() ? nullptr : chunks[0].data();
    parallel_for(tasks_, [&](int task) {
      TaskCounts& c = counts_[static_cast<size_t>(task)];
      try {
        for (size_t i; (i = next.fetch_add(1)) < chunks.size();) {
          const std::string_view chunk = chunks[i];
          if (!jsonl) {
            c.bytes += static_cast<int64_t>(chunk.size());
            if (in.kind == BpeTrainInput::Kind::Text) ++c.documents;
            pre_.count(chunk, c);
            continue;
          }
          for (size_t b = 0; b < chunk.size();) {
            size_t e = chunk.find('\n', b);
            if (e == std::string_view::npos) e = chunk.size();
            const std::string_view line = chunk.substr(b, e - b);
            const size_t offset = base + static_cast<size_t>(line.data() - origin);
            b = e + 1;
            if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
            json j;
            try {
              j = json::parse(line);
            } catch (const json::exception& ex) {
              fail(in.value, ": byte ", offset, ": invalid JSON: ", ex.what());
            }
            auto it = j.is_object() ? j.find(in.field) : j.end();
            if (!j.is_object() || it == j.end() || !it->is_string())
              fail(in.value, ": byte ", offset, ": expected an object with a string field \"",
                   in.field, "\"");
            const std::string& text = it->get_ref<const std::string&>();
            c.bytes += static_cast<int64_t>(text.size());
            ++c.documents;
            pre_.count(text, c);
          }
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!err) err = std::current_exception();
        next = chunks.size();
      }
    });
    if (err) std::rethrow_exception(err);
  }

  const BpeTrainOptions& opt_;
  PreTokenizer pre_;
  int tasks_;
  std::vector<TaskCounts> counts_;
};

// Equal shares of max_bytes; what a small source leaves goes to the larger ones.
void assign_budgets(std::vector<Source>& sources, int64_t max_bytes) {
  for (Source& s : sources) s.budget = s.data.size();
  if (max_bytes <= 0) return;
  std::vector<size_t> order(sources.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return sources[a].data.size() < sources[b].data.size();
  });
  size_t left = static_cast<size_t>(max_bytes);
  for (size_t k = 0; k < order.size(); ++k) {
    Source& s = sources[order[k]];
    s.budget = std::min(s.data.size(), left / (order.size() - k));
    left -= s.budget;
  }
}

// ---------------------------------------------------------------------------------------------
// Merging

inline uint64_t pair_key(int32_t l, int32_t r) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
}

struct HeapEntry {
  int64_t count;
  int32_t l, r;
};

void learn_merges(const std::vector<std::pair<std::string, int64_t>>& word_counts, size_t target,
                  const BpeTrainOptions& opt, BpeModel& model) {
  const double t0 = now_seconds();
  const ByteAlphabet& ab = alphabet();
  std::vector<std::string>& tokens = model.tokens;
  tokens.clear();
  std::unordered_map<std::string, int32_t> token_id;
  for (int i = 0; i < 256; ++i) {
    tokens.emplace_back(1, static_cast<char>(ab.id_to_byte[i]));
    token_id.emplace(tokens.back(), i);
  }

  struct Word {
    size_t off;
    uint32_t len;
    int64_t freq;
  };
  std::vector<Word> words;
  std::vector<int32_t> syms;
  words.reserve(word_counts.size());
  for (const auto& [w, c] : word_counts) {
    words.push_back({syms.size(), static_cast<uint32_t>(w.size()), c});
    for (unsigned char b : w) syms.push_back(ab.byte_to_id[b]);
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> pair_words;
  for (uint32_t wi = 0; wi < words.size(); ++wi) {
    const Word& w = words[wi];
    const int32_t* s = &syms[w.off];
    for (uint32_t i = 0; i + 1 < w.len; ++i) {
      const uint64_t k = pair_key(s[i], s[i + 1]);
      pair_count[k] += w.freq;
      std::vector<uint32_t>& v = pair_words[k];
      if (v.empty() || v.back() != wi) v.push_back(wi);
    }
  }

  const int64_t min_freq = std::max<int64_t>(1, opt.min_frequency);
  // Highest count first; on equal counts the pair whose (left, right) bytes sort first.
  auto lower = [&tokens](const HeapEntry& a, const HeapEntry& b) {
    if (a.count != b.count) return a.count < b.count;
    if (a.l != b.l) {
      const int c = tokens[static_cast<size_t>(a.l)].compare(tokens[static_cast<size_t>(b.l)]);
      if (c != 0) return c > 0;
    }
    return tokens[static_cast<size_t>(a.r)].compare(tokens[static_cast<size_t>(b.r)]) > 0;
  };
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, decltype(lower)> heap(lower);
  for (const auto& [k, c] : pair_count)
    if (c >= min_freq)
      heap.push({c, static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xFFFFFFFFu)});

  std::vector<uint32_t> seen(words.size(), UINT32_MAX);
  std::vector<uint64_t> touched;
  const size_t total_merges = target > 256 ? target - 256 : 0;
  double last_report = t0;
  while (tokens.size() < target && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    const uint64_t key = pair_key(top.l, top.r);
    auto pc = pair_count.find(key);
    const int64_t current = pc == pair_count.end() ? 0 : pc->second;
    if (current != top.count) {
      // The count dropped since this entry was pushed: queue it again at its real place.
      // (A count that grew has a newer entry already.)
      if (current < top.count && current >= min_freq) heap.push({current, top.l, top.r});
      continue;
    }
    const int32_t a = top.l, b = top.r;
    std::string merged = tokens[static_cast<size_t>(a)] + tokens[static_cast<size_t>(b)];
    int32_t n;
    if (auto it = token_id.find(merged); it != token_id.end()) {
      n = it->second;  // another pair already made this string: same token, one more merge
    } else {
      n = static_cast<int32_t>(tokens.size());
      token_id.emplace(merged, n);
      tokens.push_back(std::move(merged));
    }
    model.merges.push_back({a, b});
    pair_count.erase(pc);
    std::vector<uint32_t> holders;
    if (auto it = pair_words.find(key); it != pair_words.end()) {
      holders = std::move(it->second);
      pair_words.erase(it);
    }
    const uint32_t stamp = static_cast<uint32_t>(model.merges.size());
    touched.clear();
    for (uint32_t wi : holders) {
      if (seen[wi] == stamp) continue;
      seen[wi] = stamp;
      Word& w = words[wi];
      int32_t* s = &syms[w.off];
      auto change = [&](int32_t l, int32_t r, int delta) {
        const uint64_t k = pair_key(l, r);
        if (k == key) return;
        auto it = pair_count.find(k);
        if (delta > 0) {
          if (it == pair_count.end()) it = pair_count.emplace(k, 0).first;
          it->second += w.freq;
          touched.push_back(k);
          std::vector<uint32_t>& v = pair_words[k];
          if (v.empty() || v.back() != wi) v.push_back(wi);
        } else if (it != pair_count.end()) {
          it->second -= w.freq;
          if (it->second <= 0) pair_count.erase(it);
        }
      };
      uint32_t j = 0;
      for (uint32_t i = 0; i < w.len;) {
        if (i + 1 < w.len && s[i] == a && s[i + 1] == b) {
          if (j > 0) {
            change(s[j - 1], a, -1);
            change(s[j - 1], n, +1);
          }
          if (i + 2 < w.len) {
            change(b, s[i + 2], -1);
            change(n, s[i + 2], +1);
          }
          s[j++] = n;
          i += 2;
        } else {
          s[j++] = s[i++];
        }
      }
      w.len = j;
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t k : touched) {
      auto it = pair_count.find(k);
      if (it != pair_count.end() && it->second >= min_freq)
        heap.push(
            {it->second, static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xFFFFFFFFu)});
    }
    const double now = now_seconds();
    if (opt.progress && (now - last_report > 2.0 || tokens.size() == target)) {
      std::fprintf(stderr, "merges: %zu / %zu, %.1f s\n", model.merges.size(), total_merges,
                   now - t0);
      last_report = now;
    }
  }
  model.stats.merges = static_cast<int64_t>(model.merges.size());
  model.stats.merge_seconds = now_seconds() - t0;
}

std::string json_str(std::string_view s) {
  return json(std::string(s)).dump();
}

}  // namespace

std::vector<std::string> bpe_added_tokens(int reserved) {
  std::vector<std::string> out(std::begin(kSpecials), std::end(kSpecials));
  for (int i = 0; i < reserved; ++i) out.push_back("<|reserved_" + std::to_string(i) + "|>");
  return out;
}

std::string bpe_bytes_to_bytelevel(std::string_view bytes) { return td::bytes_to_bytelevel(bytes); }

std::vector<std::string> corpus_split_files(const std::string& dir, const std::string& split) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir, ": not a directory");
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_directory()) continue;
    const fs::path f = e.path() / (split + ".jsonl");
    if (fs::is_regular_file(f)) out.push_back(f.string());
  }
  if (ec) fail(dir, ": cannot list: ", ec.message());
  std::sort(out.begin(), out.end());
  if (out.empty()) fail(dir, ": no <domain>/", split, ".jsonl files");
  return out;
}

BpeModel train_bpe(const std::vector<BpeTrainInput>& inputs, const BpeTrainOptions& opt) {
  const int n_added = 4 + std::max(0, opt.reserved_tokens);
  if (opt.reserved_tokens < 0) fail("reserved_tokens must be >= 0 (got ", opt.reserved_tokens, ")");
  if (opt.vocab_size < 256 + n_added)
    fail("vocab_size ", opt.vocab_size, " is too small: the 256 byte tokens and ", n_added,
         " added tokens need ", 256 + n_added);
  BpeModel model;
  model.added_tokens = bpe_added_tokens(opt.reserved_tokens);

  std::vector<Source> sources;
  sources.reserve(inputs.size());
  for (const BpeTrainInput& in : inputs) {
    Source s{&in, nullptr, {}, 0};
    if (in.kind == BpeTrainInput::Kind::Text) {
      s.data = in.value;
    } else {
      s.file = std::make_unique<MappedFile>(in.value);
      s.data = std::string_view(reinterpret_cast<const char*>(s.file->data()), s.file->size());
    }
    sources.push_back(std::move(s));
  }
  assign_budgets(sources, opt.max_bytes);

  const double t0 = now_seconds();
  Counter counter(opt, model.added_tokens);
  counter.run(sources);
  const std::vector<std::pair<std::string, int64_t>> words = counter.words(model.stats);
  model.stats.count_seconds = now_seconds() - t0;
  if (model.stats.input_bytes == 0) fail("the training inputs hold no text");
  if (opt.progress)
    std::fprintf(stderr,
                 "counted %.1f MB of text in %lld documents: %lld pieces, %lld distinct, %.1f s\n",
                 static_cast<double>(model.stats.input_bytes) / 1e6,
                 static_cast<long long>(model.stats.documents),
                 static_cast<long long>(model.stats.pretokens),
                 static_cast<long long>(model.stats.unique_words), model.stats.count_seconds);

  const size_t target = static_cast<size_t>(opt.vocab_size - n_added);
  learn_merges(words, target, opt, model);
  // Ran out of pairs: pad with reserved tokens so that the vocabulary is exactly vocab_size.
  for (int r = opt.reserved_tokens; model.vocab_size() < opt.vocab_size; ++r)
    model.added_tokens.push_back("<|reserved_" + std::to_string(r) + "|>");
  if (opt.progress)
    std::fprintf(stderr, "learned %zu merges (%zu tokens + %zu added = %d) in %.1f s\n",
                 model.merges.size(), model.tokens.size(), model.added_tokens.size(),
                 model.vocab_size(), model.stats.merge_seconds);
  return model;
}

std::string bpe_tokenizer_json(const BpeModel& model) {
  const ordered_json byte_level = {{"type", "ByteLevel"},
                                   {"add_prefix_space", false},
                                   {"trim_offsets", false},
                                   {"use_regex", false}};
  const ordered_json split = {{"type", "Split"},
                              {"pattern", {{"Regex", kQwen2SplitPattern}}},
                              {"behavior", "Isolated"},
                              {"invert", false}};
  const ordered_json pre = {{"type", "Sequence"},
                            {"pretokenizers", ordered_json::array({split, byte_level})}};
  std::string o;
  o.reserve(model.tokens.size() * 40 + 4096);
  o += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  "
       "\"added_tokens\": [";
  for (size_t i = 0; i < model.added_tokens.size(); ++i) {
    const ordered_json t = {{"id", model.tokens.size() + i},
                            {"content", model.added_tokens[i]},
                            {"single_word", false},
                            {"lstrip", false},
                            {"rstrip", false},
                            {"normalized", false},
                            {"special", true}};
    o += (i ? ",\n    " : "\n    ") + t.dump();
  }
  o += "\n  ],\n  \"normalizer\": null,\n  \"pre_tokenizer\": " + pre.dump();
  o += ",\n  \"post_processor\": " + byte_level.dump();
  o += ",\n  \"decoder\": " + byte_level.dump();
  o += ",\n  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": "
       "null,\n"
       "    \"continuing_subword_prefix\": \"\",\n    \"end_of_word_suffix\": \"\",\n    "
       "\"fuse_unk\": false,\n"
       "    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {";
  std::vector<std::string> spelled(model.tokens.size());
  for (size_t i = 0; i < model.tokens.size(); ++i) {
    spelled[i] = json_str(bpe_bytes_to_bytelevel(model.tokens[i]));
    o += (i ? ",\n      " : "\n      ") + spelled[i] + ": " + std::to_string(i);
  }
  o += "\n    },\n    \"merges\": [";
  for (size_t i = 0; i < model.merges.size(); ++i) {
    const auto [l, r] = model.merges[i];
    o += (i ? ",\n      [" : "\n      [") + spelled[static_cast<size_t>(l)] + ", " +
         spelled[static_cast<size_t>(r)] + "]";
  }
  o += "\n    ]\n  }\n}\n";
  return o;
}

std::string bpe_tokenizer_config_json(const BpeModel& model, int64_t model_max_length) {
  // ChatML as dspark's apply_chat_template(ChatFormat::ChatML) writes it (Qwen's, without tools
  // and thinking).
  static const char* kChatTemplate =
      "{%- for message in messages %}\n"
      "    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
      "{%- endfor %}\n"
      "{%- if add_generation_prompt %}\n"
      "    {{- '<|im_start|>assistant\\n' }}\n"
      "{%- endif %}\n";
  ordered_json decoder = ordered_json::object();
  for (size_t i = 0; i < model.added_tokens.size(); ++i)
    decoder[std::to_string(model.tokens.size() + i)] = {{"content", model.added_tokens[i]},
                                                        {"lstrip", false},
                                                        {"normalized", false},
                                                        {"rstrip", false},
                                                        {"single_word", false},
                                                        {"special", true}};
  ordered_json c;
  c["add_bos_token"] = false;
  c["add_prefix_space"] = false;
  c["added_tokens_decoder"] = decoder;
  c["additional_special_tokens"] = {"<|im_start|>", "<|im_end|>", "<|mask|>"};
  c["bos_token"] = nullptr;
  c["chat_template"] = kChatTemplate;
  c["clean_up_tokenization_spaces"] = false;
  c["eos_token"] = "<|im_end|>";
  c["errors"] = "replace";
  c["mask_token"] = "<|mask|>";
  c["model_max_length"] = model_max_length;
  c["pad_token"] = "<|endoftext|>";
  c["split_special_tokens"] = false;
  c["tokenizer_class"] = "Qwen2Tokenizer";
  c["unk_token"] = nullptr;
  return c.dump(2) + "\n";
}

void write_bpe_tokenizer(const BpeModel& model, const std::string& out_path,
                         int64_t model_max_length) {
  const fs::path out(out_path);
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(dir.string(), ": cannot create directory: ", ec.message());
  const std::string tj = bpe_tokenizer_json(model);
  write_file_atomic(out_path, tj.data(), tj.size());
  const std::string cj = bpe_tokenizer_config_json(model, model_max_length);
  write_file_atomic((dir / "tokenizer_config.json").string(), cj.data(), cj.size());
}

BpeModel train_bpe_tokenizer(const std::vector<BpeTrainInput>& inputs,
                             const BpeTrainOptions& options, const std::string& out_path) {
  BpeModel model = train_bpe(inputs, options);
  write_bpe_tokenizer(model, out_path, options.model_max_length);
  return model;
}

}  // namespace dspark

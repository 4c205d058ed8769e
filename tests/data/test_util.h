// Helpers shared by the data tests: temporary directories, synthetic source files (dictd,
// info, the Bible Retrieval System's LZW windows) and a tiny tokenizer.json.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dspark::testing {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("dspark_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string path() const { return path_.string(); }
  std::string sub(const std::string& name) const {
    fs::create_directories(path_ / name);
    return (path_ / name).string();
  }
  std::string write(const std::string& name, const std::string& content) const {
    const fs::path p = path_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

// The "text" of every line of a corpus JSONL file.
inline std::vector<std::string> jsonl_texts(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& l : lines_of(slurp(path))) out.push_back(nlohmann::json::parse(l).at("text").get<std::string>());
  return out;
}

// Unix compress(1) LZW with the same code-group alignment as the original encoder: codes are
// packed LSB-first in groups of n_bits bytes, and a group is padded out whenever the code
// width grows. No 3-byte header (the BRS data file stores raw blocks).
inline std::string lzw_compress(const std::string& in, int maxbits = 16) {
  std::string out;
  if (in.empty()) return out;
  int n_bits = 9;
  int64_t maxcode = 511;
  const int64_t maxmaxcode = int64_t(1) << maxbits;
  int64_t free_ent = 257;
  uint8_t buf[16] = {};
  int offset = 0;
  const auto put_group = [&](int bytes) {
    out.append(reinterpret_cast<const char*>(buf), size_t(bytes));
    std::fill(buf, buf + 16, uint8_t(0));
  };
  const auto output = [&](int64_t code) {
    for (int k = 0; k < n_bits; ++k)
      if ((code >> k) & 1) buf[(offset + k) >> 3] |= uint8_t(1u << ((offset + k) & 7));
    offset += n_bits;
    if (offset == n_bits * 8) {
      put_group(n_bits);
      offset = 0;
    }
    if (free_ent > maxcode) {
      if (offset > 0) put_group(n_bits);
      offset = 0;
      ++n_bits;
      maxcode = n_bits == maxbits ? maxmaxcode : (int64_t(1) << n_bits) - 1;
    }
  };
  std::map<std::pair<int64_t, uint8_t>, int64_t> dict;
  int64_t ent = uint8_t(in[0]);
  for (size_t i = 1; i < in.size(); ++i) {
    const uint8_t c = uint8_t(in[i]);
    auto it = dict.find({ent, c});
    if (it != dict.end()) {
      ent = it->second;
      continue;
    }
    output(ent);
    if (free_ent < maxmaxcode) dict[{ent, c}] = free_ent++;
    ent = c;
  }
  output(ent);
  if (offset > 0) put_group((offset + 7) / 8);
  return out;
}

// A Bible Retrieval System data file ("EC02", big-endian window table, LZW windows).
inline std::string make_brs_file(const std::string& text, uint32_t window) {
  std::vector<std::string> blocks;
  for (size_t i = 0; i < text.size(); i += window) blocks.push_back(lzw_compress(text.substr(i, window)));
  std::string f = "EC02";
  std::string desc = "Compressed Data File";
  desc.resize(80, '\0');
  f += desc;
  const auto be32 = [&](uint32_t v) {
    f += char(v >> 24);
    f += char((v >> 16) & 0xFF);
    f += char((v >> 8) & 0xFF);
    f += char(v & 0xFF);
  };
  be32(window);
  be32(uint32_t(blocks.size()));
  uint32_t at = uint32_t(f.size() + 4 * (blocks.size() + 1));
  for (const auto& b : blocks) {
    be32(at);
    at += uint32_t(b.size());
  }
  be32(at);
  for (const auto& b : blocks) f += b;
  return f;
}

// dictd files from (headwords, article) pairs: returns {index text, dict text}.
inline std::pair<std::string, std::string> make_dictd(
    const std::vector<std::pair<std::vector<std::string>, std::string>>& articles) {
  static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto num = [](uint64_t v) {
    std::string s;
    do {
      s.insert(s.begin(), kB64[v % 64]);
      v /= 64;
    } while (v);
    return s;
  };
  std::string dict, index;
  std::vector<std::pair<std::string, std::string>> lines;
  for (const auto& [heads, body] : articles) {
    const uint64_t off = dict.size();
    dict += body;
    for (const auto& h : heads) lines.emplace_back(h, h + "\t" + num(off) + "\t" + num(body.size()) + "\n");
  }
  std::sort(lines.begin(), lines.end());
  for (const auto& [h, l] : lines) index += l;
  return {index, dict};
}

// GPT-2's byte -> character map, written out here independently of the tokenizer.
inline std::string byte_char(unsigned b) {
  unsigned cp;
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
    cp = b;
  } else {
    unsigned n = 0;
    for (unsigned x = 0; x < b; ++x)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// A byte-level BPE tokenizer.json: the 256 byte tokens, a few merges, and <|endoftext|>,
// <|im_start|>, <|im_end|> as added tokens starting at `special_base` (>= 256 + merges).
inline std::string tiny_tokenizer_json(int special_base = 300) {
  using nlohmann::json;
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[byte_char(b)] = int(b);
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"}, {"th", "e"}, {"Ġ", "the"}, {"i", "n"}, {"Ġ", "a"}, {"e", "r"}, {"o", "n"}, {"Ġ", "t"}};
  json jm = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = next++;
    jm.push_back(a + " " + b);
  }
  json added = json::array();
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (size_t i = 0; i < specials.size(); ++i)
    added.push_back({{"id", special_base + int(i)}, {"content", specials[i]}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
  json t = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
            {"post_processor", nullptr},
            {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
            {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                       {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                       {"ignore_merges", false}, {"vocab", vocab}, {"merges", jm}}}};
  return t.dump();
}

}  // namespace dspark::testing

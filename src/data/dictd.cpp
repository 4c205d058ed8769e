#include "data/dictd.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/mmap_file.h"
#include "data/compress.h"
#include "data/text_util.h"

namespace dspark::data {

namespace {
const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

bool decode_dictd_number(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (const char c : s) {
    const char* p = std::find(kB64, kB64 + 64, c);
    if (p == kB64 + 64) return false;
    v = v * 64 + uint64_t(p - kB64);
  }
  *out = v;
  return true;
}

std::string encode_dictd_number(uint64_t v) {
  std::string s;
  do {
    s.insert(s.begin(), kB64[v % 64]);
    v /= 64;
  } while (v);
  return s;
}

std::vector<DictdEntry> read_dictd(const std::string& index_path, const std::string& dict_path, bool skip_meta) {
  const std::string index = read_text_file(index_path);
  std::string dict;
  if (ends_with(dict_path, ".dz") || ends_with(dict_path, ".gz")) dict = read_gzip_file(dict_path);
  else dict = read_text_file(dict_path);

  // (offset, length) -> first headword in index order.
  std::map<std::pair<uint64_t, uint64_t>, std::string> articles;
  size_t line_no = 0;
  for (const auto line : split_lines(index)) {
    ++line_no;
    if (line.empty()) continue;
    const size_t t2 = line.rfind('\t');
    const size_t t1 = t2 == std::string_view::npos || t2 == 0 ? std::string_view::npos : line.rfind('\t', t2 - 1);
    if (t1 == std::string_view::npos)
      fail(index_path, ":", line_no, ": malformed index line (expected headword, offset and length separated by tabs)");
    const std::string head(line.substr(0, t1));
    uint64_t off, len;
    if (!decode_dictd_number(std::string(line.substr(t1 + 1, t2 - t1 - 1)), &off) ||
        !decode_dictd_number(std::string(line.substr(t2 + 1)), &len))
      fail(index_path, ":", line_no, ": malformed offset or length for '", head, "'");
    if (off + len > dict.size())
      fail(index_path, ":", line_no, ": entry '", head, "' (offset ", off, ", length ", len, ") lies beyond the end of ",
           dict_path, " (", dict.size(), " bytes)");
    if (skip_meta && (starts_with(head, "00-database") || starts_with(head, "00database"))) continue;
    articles.emplace(std::make_pair(off, len), head);  // keeps the first headword
  }
  std::vector<DictdEntry> out;
  out.reserve(articles.size());
  uint64_t prev_off = UINT64_MAX;
  for (const auto& [key, head] : articles) {
    if (key.first == prev_off) continue;  // two lengths for one offset: keep the first
    prev_off = key.first;
    DictdEntry e;
    e.headword = head;
    e.offset = key.first;
    e.body = dict.substr(size_t(key.first), size_t(key.second));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace dspark::data

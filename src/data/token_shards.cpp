#include "data/token_shards.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/crc32.h"
#include "core/error.h"

namespace dspark {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const json& field(const json& j, const char* name, const std::string& where, const std::string& file) {
  if (!j.is_object() || !j.contains(name)) fail(file, ": missing field '", where, name, "'");
  return j[name];
}

std::string string_field(const json& j, const char* name, const std::string& where, const std::string& file) {
  const json& v = field(j, name, where, file);
  if (!v.is_string()) fail(file, ": field '", where, name, "' must be a string");
  return v.get<std::string>();
}

int64_t int_field(const json& j, const char* name, const std::string& where, const std::string& file) {
  const json& v = field(j, name, where, file);
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    fail(file, ": field '", where, name, "' must be a non-negative integer");
  return v.get<int64_t>();
}

}  // namespace

TokenShards TokenShards::open(const std::string& dir, const std::string& split, std::vector<std::string> domains) {
  const std::string mpath = dir + "/manifest.json";
  if (!fs::exists(mpath)) fail(mpath, ": missing (not a tokenized corpus; run `dspark corpus tokenize`)");
  json m;
  {
    MappedFile f(mpath);
    m = json::parse(f.data(), f.data() + f.size(), nullptr, /*allow_exceptions=*/false);
  }
  if (m.is_discarded() || !m.is_object()) fail(mpath, ": malformed manifest (not a JSON object)");
  if (string_field(m, "format", "", mpath) != "dspark-tokens-1")
    fail(mpath, ": unknown format '", m["format"].get<std::string>(), "' (expected dspark-tokens-1)");
  if (split != "train" && split != "validation" && split != "test")
    fail("unknown split '", split, "' (train, validation or test)");

  TokenShards t;
  t.split_ = split;
  const std::string dtype = string_field(m, "dtype", "", mpath);
  if (dtype == "uint16") t.elem_ = 2;
  else if (dtype == "uint32") t.elem_ = 4;
  else fail(mpath, ": field 'dtype' is '", dtype, "', expected uint16 or uint32");
  const json& tok = field(m, "tokenizer", "", mpath);
  const auto tok_crc = crc32_from_hex(string_field(tok, "crc32", "tokenizer.", mpath));
  if (!tok_crc) fail(mpath, ": field 'tokenizer.crc32' is not 8 hex digits");
  t.tokenizer_crc_ = *tok_crc;
  t.vocab_size_ = int(int_field(tok, "vocab_size", "tokenizer.", mpath));
  t.eot_id_ = int32_t(int_field(tok, "eot_id", "tokenizer.", mpath));
  if (t.elem_ == 2 && t.vocab_size_ > 65536) fail(mpath, ": dtype uint16 cannot hold vocab size ", t.vocab_size_);

  const json& jd = field(m, "domains", "", mpath);
  if (!jd.is_array()) fail(mpath, ": field 'domains' must be an array");
  std::vector<std::string> names;
  for (size_t i = 0; i < jd.size(); ++i) names.push_back(string_field(jd[i], "name", "domains[].", mpath));
  for (const auto& want : domains)
    if (std::find(names.begin(), names.end(), want) == names.end()) {
      std::string all;
      for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
      fail(mpath, ": no domain '", want, "' (it has: ", all, ")");
    }
  for (size_t i = 0; i < jd.size(); ++i) {
    const std::string& name = names[i];
    if (!domains.empty() && std::find(domains.begin(), domains.end(), name) == domains.end()) continue;
    const std::string where = "domains[" + name + "].splits." + split + ".";
    const json& s = field(field(jd[i], "splits", "domains[" + name + "].", mpath), split.c_str(),
                          "domains[" + name + "].splits.", mpath);
    const std::string file = dir + "/" + string_field(s, "file", where, mpath);
    const int64_t tokens = int_field(s, "tokens", where, mpath);
    const auto want_crc = crc32_from_hex(string_field(s, "crc32", where, mpath));
    if (!want_crc) fail(mpath, ": field '", where, "crc32' is not 8 hex digits");
    if (!fs::exists(file)) fail(file, ": missing shard (listed in ", mpath, ")");
    Shard sh;
    sh.map = MappedFile(file);
    const uint64_t want_bytes = uint64_t(tokens) * uint64_t(t.elem_);
    if (sh.map.size() != want_bytes)
      fail(file, ": truncated shard: ", sh.map.size(), " bytes, but ", mpath, " lists ", tokens, " ", dtype,
           " tokens (", want_bytes, " bytes)");
    const uint32_t crc = crc32_bytes(sh.map.data(), sh.map.size());
    if (crc != *want_crc)
      fail(file, ": corrupt shard: CRC32 ", crc32_hex(crc), " does not match ", crc32_hex(*want_crc),
           " in ", mpath);
    sh.begin = t.total_;
    sh.n = tokens;
    t.total_ += tokens;
    t.domain_sizes_.emplace_back(name, tokens);
    t.shards_.push_back(std::move(sh));
  }
  return t;
}

int64_t TokenShards::shard_of(int64_t i) const {
  // The last shard whose begin <= i (empty shards are skipped by the n check in callers).
  size_t lo = 0, hi = shards_.size();
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    if (shards_[mid].begin <= i) lo = mid;
    else hi = mid;
  }
  while (lo + 1 < shards_.size() && shards_[lo].begin + shards_[lo].n <= i) ++lo;
  return int64_t(lo);
}

int32_t TokenShards::at(int64_t i) const {
  if (i < 0 || i >= total_) fail("token index ", i, " out of range (", total_, " tokens in the ", split_, " split)");
  const Shard& s = shards_[size_t(shard_of(i))];
  const int64_t k = i - s.begin;
  if (elem_ == 2) {
    uint16_t v;
    std::memcpy(&v, s.map.data() + k * 2, 2);
    return int32_t(v);
  }
  uint32_t v;
  std::memcpy(&v, s.map.data() + k * 4, 4);
  return int32_t(v);
}

std::vector<int64_t> TokenShards::window_starts(int64_t span, int windows) const {
  std::vector<int64_t> starts;
  for (int w = 0; w < windows && total_ > span; ++w) starts.push_back((total_ - span) * w / windows);
  return starts;
}

void TokenShards::copy(int64_t begin, int64_t n, int32_t* out) const {
  if (n == 0) return;
  if (begin < 0 || n < 0 || begin + n > total_)
    fail("token range [", begin, ", ", begin + n, ") out of range (", total_, " tokens in the ", split_, " split)");
  size_t si = size_t(shard_of(begin));
  int64_t pos = begin;
  while (n > 0) {
    const Shard& s = shards_[si];
    const int64_t k = pos - s.begin;
    const int64_t take = std::min(n, s.n - k);
    if (take > 0) {
      if (elem_ == 2) {
        const auto* p = reinterpret_cast<const uint16_t*>(s.map.data()) + k;
        for (int64_t j = 0; j < take; ++j) out[j] = int32_t(p[j]);
      } else {
        const auto* p = reinterpret_cast<const uint32_t*>(s.map.data()) + k;
        for (int64_t j = 0; j < take; ++j) out[j] = int32_t(p[j]);
      }
      out += take;
      pos += take;
      n -= take;
    }
    ++si;
  }
}

}  // namespace dspark

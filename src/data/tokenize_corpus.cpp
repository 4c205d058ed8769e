#include "data/tokenize_corpus.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/crc32.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "core/timer.h"
#include "data/compress.h"
#include "data/corpus.h"
#include "data/text_util.h"
#include "tokenizer/tokenizer.h"

namespace dspark::data {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

static_assert(std::endian::native == std::endian::little, "token shards are written little-endian");

std::vector<std::string> read_corpus_jsonl(const std::string& path) {
  const std::string data = read_text_file(path);
  std::vector<std::string> out;
  size_t line_no = 0;
  for (const auto line : split_lines(data)) {
    ++line_no;
    if (trim(line).empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) fail(path, ":", line_no, ": malformed JSON line");
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      fail(path, ":", line_no, ": expected an object with a string field \"text\"");
    out.push_back(j["text"].get<std::string>());
  }
  return out;
}

namespace {

ojson load_json(const std::string& path) {
  const std::string text = read_text_file(path);
  ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(path, ": malformed JSON");
  if (!j.is_object()) fail(path, ": expected a JSON object");
  return j;
}

// Encodes documents on `threads` threads; the ids come back in document order, each document
// followed by `eot`.
std::vector<int32_t> encode_all(const Tokenizer& tok, const std::vector<std::string>& docs, int32_t eot, int threads) {
  constexpr size_t kBlock = 64;
  const size_t blocks = (docs.size() + kBlock - 1) / kBlock;
  std::vector<std::vector<int32_t>> parts(blocks);
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  const auto work = [&] {
    try {
      for (size_t b; (b = next.fetch_add(1)) < blocks;) {
        std::vector<int32_t>& out = parts[b];
        for (size_t i = b * kBlock; i < std::min(docs.size(), (b + 1) * kBlock); ++i) {
          const auto ids = tok.encode(docs[i]);
          out.insert(out.end(), ids.begin(), ids.end());
          out.push_back(eot);
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
      next = blocks;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  size_t total = 0;
  for (const auto& p : parts) total += p.size();
  std::vector<int32_t> out;
  out.reserve(total);
  for (auto& p : parts) {
    out.insert(out.end(), p.begin(), p.end());
    std::vector<int32_t>().swap(p);
  }
  return out;
}

}  // namespace

TokenizeResult tokenize_corpus(const TokenizeOptions& opt) {
  const double t0 = now_seconds();
  const auto log = [&](const std::string& m) {
    if (opt.log) opt.log(m);
  };
  if (opt.corpus_dir.empty() || opt.tokenizer_file.empty() || opt.out_dir.empty())
    fail("corpus tokenize: --corpus, --tokenizer and --out are required");
  const std::string manifest_path = opt.corpus_dir + "/manifest.json";
  if (!fs::exists(manifest_path))
    fail(manifest_path, ": missing (is ", opt.corpus_dir, " a corpus built by `dspark corpus build`?)");
  ojson corpus = load_json(manifest_path);
  if (!corpus.contains("domains") || !corpus["domains"].is_array())
    fail(manifest_path, ": missing or malformed field 'domains'");

  auto tok = Tokenizer::from_file(opt.tokenizer_file);
  const auto eot = tok->token_to_id("<|endoftext|>");
  if (!eot) fail(opt.tokenizer_file, ": the tokenizer has no <|endoftext|> token to separate documents");
  const int vocab = tok->vocab_size();
  const bool u16 = vocab <= 65536;
  const uint32_t tok_crc = crc32_file(opt.tokenizer_file);
  int threads = opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));

  // The manifest is the commit marker: remove an old one first.
  std::error_code ec;
  fs::create_directories(opt.out_dir);
  fs::remove(opt.out_dir + "/manifest.json", ec);

  TokenizeResult result;
  result.tokenizer_crc = tok_crc;
  result.vocab_size = vocab;
  ojson jdomains = ojson::array();
  ojson counts = ojson::object();
  ojson totals = {{"train", 0}, {"validation", 0}, {"test", 0}};
  for (size_t di = 0; di < corpus["domains"].size(); ++di) {
    const ojson& d = corpus["domains"][di];
    if (!d.is_object() || !d.contains("name") || !d["name"].is_string() || !d.contains("splits") ||
        !d["splits"].is_object())
      fail(manifest_path, ": domains[", di, "] lacks 'name' or 'splits'");
    const std::string name = d["name"].get<std::string>();
    ojson jd;
    jd["name"] = name;
    ojson jsplits = ojson::object();
    for (const auto& split : corpus_splits()) {
      if (!d["splits"].contains(split)) fail(manifest_path, ": domain '", name, "' has no split '", split, "'");
      const ojson& s = d["splits"][split];
      if (!s.contains("file") || !s["file"].is_string() || !s.contains("crc32") || !s["crc32"].is_string())
        fail(manifest_path, ": domain '", name, "' split '", split, "' lacks 'file' or 'crc32'");
      const std::string file = opt.corpus_dir + "/" + s["file"].get<std::string>();
      const auto want = crc32_from_hex(s["crc32"].get<std::string>());
      if (!want) fail(manifest_path, ": malformed crc32 for ", s["file"].get<std::string>());
      if (!fs::exists(file)) fail(file, ": missing (listed in ", manifest_path, ")");
      if (crc32_file(file) != *want) fail(file, ": corrupt corpus file (CRC32 does not match ", manifest_path, ")");
      const double t = now_seconds();
      const auto docs = read_corpus_jsonl(file);
      const auto ids = encode_all(*tok, docs, *eot, threads);
      std::string bytes;
      if (u16) {
        bytes.resize(ids.size() * 2);
        auto* p = reinterpret_cast<uint16_t*>(bytes.data());
        for (size_t i = 0; i < ids.size(); ++i) p[i] = uint16_t(ids[i]);
      } else {
        bytes.resize(ids.size() * 4);
        auto* p = reinterpret_cast<uint32_t*>(bytes.data());
        for (size_t i = 0; i < ids.size(); ++i) p[i] = uint32_t(ids[i]);
      }
      const std::string rel = name + "/" + split + ".bin";
      fs::create_directories(opt.out_dir + "/" + name);
      write_file_atomic(opt.out_dir + "/" + rel, bytes.data(), bytes.size());
      jsplits[split] = {{"file", rel},
                        {"documents", int64_t(docs.size())},
                        {"tokens", int64_t(ids.size())},
                        {"crc32", crc32_hex(crc32_bytes(bytes.data(), bytes.size()))},
                        {"source", s["file"]},
                        {"source_crc32", s["crc32"]}};
      counts[name][split] = int64_t(ids.size());
      totals[split] = totals[split].get<int64_t>() + int64_t(ids.size());
      result.shards.push_back({name, split, int64_t(docs.size()), int64_t(ids.size())});
      result.total_tokens += int64_t(ids.size());
      char buf[200];
      std::snprintf(buf, sizeof buf, "corpus tokenize: %-12s %-10s %8zu documents %11zu tokens (%.1f s)", name.c_str(),
                    split.c_str(), docs.size(), ids.size(), now_seconds() - t);
      log(buf);
    }
    jd["splits"] = jsplits;
    jdomains.push_back(jd);
  }

  ojson m;
  m["format"] = "dspark-tokens-1";
  m["corpus"] = {{"dir", fs::absolute(opt.corpus_dir).lexically_normal().string()},
                 {"seed", corpus.contains("seed") ? corpus["seed"] : ojson()}};
  m["tokenizer"] = {{"file", fs::absolute(opt.tokenizer_file).lexically_normal().string()},
                    {"crc32", crc32_hex(tok_crc)},
                    {"vocab_size", vocab},
                    {"eot_id", *eot}};
  m["dtype"] = u16 ? "uint16" : "uint32";
  m["separator"] = "every document is followed by the <|endoftext|> id";
  m["domains"] = jdomains;
  m["totals"] = totals;
  const std::string text = m.dump(2) + "\n";
  write_file_atomic(opt.out_dir + "/manifest.json", text.data(), text.size());

  if (opt.update_corpus_manifest) {
    // Token counts, keyed by the tokenizer's CRC32, in the corpus manifest too.
    corpus["tokens"][crc32_hex(tok_crc)] = {{"tokenizer", fs::absolute(opt.tokenizer_file).lexically_normal().string()},
                                            {"vocab_size", vocab},
                                            {"shards", fs::absolute(opt.out_dir).lexically_normal().string()},
                                            {"counts", counts},
                                            {"totals", totals}};
    const std::string ctext = corpus.dump(2) + "\n";
    write_file_atomic(manifest_path, ctext.data(), ctext.size());
  }
  result.seconds = now_seconds() - t0;
  return result;
}

}  // namespace dspark::data

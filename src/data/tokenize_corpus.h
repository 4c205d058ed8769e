// `dspark corpus tokenize`: encodes every split of a built corpus into token shards.
//
//   DIR2/<domain>/<split>.bin   token ids, little-endian uint16 (vocab <= 65536) or uint32;
//                               every document is followed by the <|endoftext|> id
//   DIR2/manifest.json          dtype, tokenizer CRC32 and vocab size, token counts and the
//                               CRC32 of every shard (written last)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dspark::data {

struct TokenizeOptions {
  std::string corpus_dir;
  std::string tokenizer_file;
  std::string out_dir;
  int threads = 0;                  // 0: every core
  bool update_corpus_manifest = true;  // record the counts under "tokens" in the corpus manifest
  std::function<void(const std::string&)> log;
};

struct TokenizeResult {
  struct Shard {
    std::string domain, split;
    int64_t documents = 0, tokens = 0;
  };
  std::vector<Shard> shards;
  uint32_t tokenizer_crc = 0;
  int vocab_size = 0;
  int64_t total_tokens = 0;
  double seconds = 0;
};

TokenizeResult tokenize_corpus(const TokenizeOptions& opt);

// The texts of a corpus JSONL file ({"text": ...} per line). Errors name the file and line.
std::vector<std::string> read_corpus_jsonl(const std::string& path);

}  // namespace dspark::data

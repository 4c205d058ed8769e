// TokenShards: the trainer's view of a tokenized corpus (`dspark corpus tokenize` output).
// Memory-maps the shards of one split, validates the manifest, sizes and CRC32s, and presents
// them as one sequence of token ids (domains in manifest order). No libtorch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/mmap_file.h"

namespace dspark {

class TokenShards {
 public:
  // `split`: train, validation or test. `domains` empty: every domain in the manifest. Errors
  // (Error) name the file: missing or malformed manifest, missing shard, truncated shard (size
  // not matching the manifest), corrupt shard (CRC32 mismatch), unknown domain or split.
  static TokenShards open(const std::string& dir, const std::string& split, std::vector<std::string> domains = {});

  int64_t size() const { return total_; }                    // tokens in total
  int32_t at(int64_t i) const;                                // token i of the concatenation
  void copy(int64_t begin, int64_t n, int32_t* out) const;   // tokens [begin, begin + n)
  // The starts of `windows` evaluation windows of `span` tokens spread evenly over the tokens
  // (window w at (size - span) * w / windows); none when there are not more than `span` tokens.
  // `dspark train eval` and `dspark model perplexity` score the same windows through this.
  std::vector<int64_t> window_starts(int64_t span, int windows) const;
  uint32_t tokenizer_crc() const { return tokenizer_crc_; }
  int vocab_size() const { return vocab_size_; }
  int32_t eot_id() const { return eot_id_; }
  const std::string& split() const { return split_; }
  const std::vector<std::pair<std::string, int64_t>>& domain_sizes() const { return domain_sizes_; }

 private:
  struct Shard {
    MappedFile map;
    int64_t begin = 0;  // first token's index in the concatenation
    int64_t n = 0;
  };
  int64_t shard_of(int64_t i) const;

  std::vector<Shard> shards_;
  std::vector<std::pair<std::string, int64_t>> domain_sizes_;
  std::string split_;
  int64_t total_ = 0;
  int elem_ = 2;  // bytes per token
  uint32_t tokenizer_crc_ = 0;
  int vocab_size_ = 0;
  int32_t eot_id_ = -1;
};

}  // namespace dspark

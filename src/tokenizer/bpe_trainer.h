// Byte-level BPE training: learns a Qwen2/Qwen3-style tokenizer.json from text.
//
// Pipeline (the same one Tokenizer::encode runs on a file this writes):
//   added/special tokens split out (never learned from) -> Qwen2 regex split (JsRegex, as in
//   encode) -> raw bytes of each piece counted as a "word" -> standard BPE over the word counts:
//   repeatedly merge the most frequent adjacent pair (ties: the pair whose (left, right) byte
//   strings are lexicographically smallest), pair counts kept incrementally with an index from
//   pairs to the words holding them and a max-heap with lazy deletion.
// The base vocabulary is the 256 bytes in GPT-2's byte-level order (id 0 = "!", ...). The result
// is deterministic: the same inputs and options give byte-identical files, whatever the threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dspark {

// The pre-tokenizer regex of Qwen2/Qwen3's tokenizer.json (JavaScript syntax).
extern const char* const kQwen2SplitPattern;

struct BpeTrainOptions {
  int vocab_size = 8192;      // total vocabulary, added tokens included
  int64_t min_frequency = 2;  // a pair seen fewer times than this is never merged
  int reserved_tokens =
      12;                 // <|reserved_0|>... after <|endoftext|> <|im_start|> <|im_end|> <|mask|>
  int threads = 0;        // counting tasks; 0: dspark::num_threads()
  int64_t max_bytes = 0;  // read at most this many input bytes in all (0: everything)
  int64_t model_max_length = 32768;  // written to tokenizer_config.json
  bool progress = false;             // progress lines on stderr
  int64_t chunk_bytes = 1 << 16;     // smallest piece of a file counted by one task (tests: tiny)
};

// One training input.
struct BpeTrainInput {
  enum class Kind { Text, TextFile, JsonlFile };
  Kind kind = Kind::Text;
  std::string value;           // the text itself (Text) or a path
  std::string field = "text";  // JsonlFile: the string field of each line's object

  static BpeTrainInput text(std::string s) { return {Kind::Text, std::move(s), "text"}; }
  static BpeTrainInput text_file(std::string path) {
    return {Kind::TextFile, std::move(path), "text"};
  }
  static BpeTrainInput jsonl_file(std::string path) {
    return {Kind::JsonlFile, std::move(path), "text"};
  }
};

// DIR/<domain>/<split>.jsonl for every domain directory that has one, sorted by domain name.
// Throws Error when there is none.
std::vector<std::string> corpus_split_files(const std::string& dir,
                                            const std::string& split = "train");

struct BpeTrainStats {
  int64_t input_bytes = 0;          // bytes read (for JSONL: of the text fields)
  int64_t documents = 0;            // texts, files' chunks or JSONL lines
  int64_t pretokens = 0;            // regex pieces counted
  int64_t unique_words = 0;         // distinct pieces
  int64_t special_tokens_seen = 0;  // added tokens found in the text (not learned from)
  int64_t merges = 0;
  double count_seconds = 0, merge_seconds = 0;
};

struct BpeModel {
  // id -> raw bytes of every learned token; ids 0..255 are the single bytes in GPT-2 order.
  std::vector<std::string> tokens;
  // Merges in rank order as (left id, right id); each merge's result is the token spelled
  // tokens[left] + tokens[right] (two merges can give the same string; it has one id).
  std::vector<std::array<int32_t, 2>> merges;
  // Added tokens; their ids follow the learned ones: tokens.size() + i. All special.
  std::vector<std::string> added_tokens;
  BpeTrainStats stats;

  int vocab_size() const { return static_cast<int>(tokens.size() + added_tokens.size()); }
};

// <|endoftext|>, <|im_start|>, <|im_end|>, <|mask|>, then <|reserved_0|>...<|reserved_{n-1}|>.
std::vector<std::string> bpe_added_tokens(int reserved);

// Counts the inputs and learns merges until tokens + added tokens == vocab_size. If the text
// runs out of pairs (or of pairs seen min_frequency times) first, more reserved tokens are
// added so that the vocabulary is still exactly vocab_size. Throws Error on unreadable input
// or when the inputs hold no text at all.
BpeModel train_bpe(const std::vector<BpeTrainInput>& inputs, const BpeTrainOptions& options);

// The byte-level alphabet spelling of raw bytes (GPT-2 bytes_to_unicode).
std::string bpe_bytes_to_bytelevel(std::string_view bytes);

// tokenizer.json text (HF format: BPE model, Qwen2 Split + ByteLevel pre-tokenizer, ByteLevel
// decoder and post-processor, no normalizer) and the matching tokenizer_config.json text
// (ChatML chat template, eos <|im_end|>, pad <|endoftext|>, mask <|mask|>, no bos).
std::string bpe_tokenizer_json(const BpeModel& model);
std::string bpe_tokenizer_config_json(const BpeModel& model, int64_t model_max_length);

// Writes tokenizer.json to out_path and tokenizer_config.json in the same directory (created
// if missing).
void write_bpe_tokenizer(const BpeModel& model, const std::string& out_path,
                         int64_t model_max_length);

// train_bpe + write_bpe_tokenizer.
BpeModel train_bpe_tokenizer(const std::vector<BpeTrainInput>& inputs,
                             const BpeTrainOptions& options, const std::string& out_path);

}  // namespace dspark

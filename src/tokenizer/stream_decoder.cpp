#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_util.h"

namespace dspark {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  // Models often pad their vocabulary past the tokenizer's (Qwen3: 151936 rows, 151669
  // tokens); a sampled padding id has no text, and a stream must not fail on it.
  if (id < 0 || id >= tok_.vocab_size()) return {};
  if (skip_special_ && tok_.is_special(id)) return {};
  try {
    pending_ += tok_.token_bytes(id);
  } catch (const Error&) {
    return {};  // an id inside the range that no token has (a gap in the vocabulary)
  }
  std::string out;
  // Everything up to a trailing, still-completable UTF-8 sequence is final: concatenating the
  // pieces gives exactly Tokenizer::decode of all ids.
  const size_t consumed = tokenizer_detail::utf8_decode_prefix(pending_, out);
  pending_.erase(0, consumed);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = tokenizer_detail::utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace dspark

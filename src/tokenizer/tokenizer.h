// Tokenizer: HF tokenizer.json byte-level BPE (GPT-2, Qwen2/3, Llama-3 styles).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dspark {

// All const methods are safe to call from several threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads a tokenizer.json. Errors (Error) name the file and the offending field.
  static std::unique_ptr<Tokenizer> from_file(const std::string& tokenizer_json);
  // The tokenizer of a GGUF file, from its tokenizer.ggml.* metadata. Errors name the file and key.
  static std::unique_ptr<Tokenizer> from_gguf(const std::string& gguf_path);
  // Loads DIR/tokenizer.json, or the GGUF file DIR names (a .gguf path, or a directory holding
  // one .gguf and no config.json).
  static std::unique_ptr<Tokenizer> from_dir(const std::string& model_dir);

  // Encodes text. Added/special tokens written literally in the text are recognised.
  // add_special_tokens applies the file's post-processor (e.g. Llama-3's <|begin_of_text|>).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const = 0;
  // Decodes ids to UTF-8 text; invalid UTF-8 sequences decode to U+FFFD.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const = 0;
  // Raw bytes a token stands for (after byte-level decoding); may be partial UTF-8.
  virtual std::string token_bytes(int32_t id) const = 0;

  virtual int vocab_size() const = 0;  // largest id + 1, added tokens included
  // `token` as tokenizer.json spells it: a vocab string in the byte-level alphabet (e.g. "Ġhello")
  // or an added token's content (e.g. "<|im_end|>").
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual bool is_special(int32_t id) const = 0;
};

// Turns a stream of token ids into text pieces without splitting UTF-8 characters:
// bytes of an incomplete character are held back until the character completes.
// Ids no token has (a model's padding rows, gaps in the id range) produce no text.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special_tokens = false);
  std::string push(int32_t id);  // text that became complete with this token (may be empty)
  std::string flush();           // whatever is held back, invalid bytes as U+FFFD

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

enum class ChatFormat { ChatML, Llama3 };

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// ChatML for tokenizers with <|im_start|>, Llama-3 for those with <|start_header_id|>.
// Throws Error if the tokenizer has neither.
ChatFormat detect_chat_format(const Tokenizer& tok);
std::string apply_chat_template(ChatFormat format, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt = true);
// Token ids that end an assistant turn for this format (e.g. <|im_end|>, <|eot_id|>), if present.
std::vector<int32_t> chat_stop_tokens(const Tokenizer& tok, ChatFormat format);

}  // namespace dspark

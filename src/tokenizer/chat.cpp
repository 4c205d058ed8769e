// Chat templates: the two prompt formats dspark's models use, written out in C++ rather than
// evaluated from the Jinja template in tokenizer_config.json.
#include <string_view>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_util.h"

namespace dspark {

namespace {

// Jinja's `trim` as the reference implementation (@huggingface/jinja) evaluates it: JavaScript's
// String.prototype.trim. (Python's str.strip differs only on U+001C..U+001F, U+0085 and U+FEFF.)
std::string_view js_trim(std::string_view s) {
  return tokenizer_detail::js_trim_start(tokenizer_detail::js_trim_end(s));
}

}  // namespace

ChatFormat detect_chat_format(const Tokenizer& tok) {
  if (tok.token_to_id("<|im_start|>")) return ChatFormat::ChatML;
  if (tok.token_to_id("<|start_header_id|>")) return ChatFormat::Llama3;
  fail("tokenizer has no chat format: neither <|im_start|> (ChatML) nor <|start_header_id|> (Llama-3) is a token");
}

std::string apply_chat_template(ChatFormat format, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
  std::string out;
  switch (format) {
    case ChatFormat::ChatML:
      for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatFormat::Llama3:
      // As Meta's template: the content is trimmed (Jinja `| trim`).
      out += "<|begin_of_text|>";
      for (const ChatMessage& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
        out += js_trim(m.content);
        out += "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
  }
  return out;
}

std::vector<int32_t> chat_stop_tokens(const Tokenizer& tok, ChatFormat format) {
  std::vector<int32_t> out;
  auto add = [&](const char* name) {
    if (auto id = tok.token_to_id(name)) out.push_back(*id);
  };
  switch (format) {
    case ChatFormat::ChatML:
      add("<|im_end|>");
      add("<|endoftext|>");
      break;
    case ChatFormat::Llama3:
      add("<|eot_id|>");
      add("<|end_of_text|>");
      add("<|eom_id|>");
      break;
  }
  return out;
}

}  // namespace dspark

// OpenAI / vLLM request bodies, parsed and validated into engine requests. A refused request is an
// Error (core/error.h) whose kind and param say how to answer it (server/errors.h: api_error).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

// The tokenizer's bytes for response_format's token masks, built on first use (thread-safe).
class GrammarVocab {
 public:
  GrammarVocab(const Tokenizer& tok, std::vector<int32_t> eos) : tok_(tok), eos_(std::move(eos)) {}
  std::shared_ptr<const TokenVocab> get() const;

 private:
  const Tokenizer& tok_;
  std::vector<int32_t> eos_;
  mutable std::once_flag once_;
  mutable std::shared_ptr<const TokenVocab> vocab_;
};

// What parsing needs to know about the served model.
struct ServedModel {
  std::string name;  // the served model name: a request's "model" must equal it
  const Tokenizer* tok = nullptr;
  int vocab_size = 0;                     // token ids must be below it (the model's embedding rows)
  int max_model_len = 0;                  // prompt + output positions at most
  std::vector<int32_t> eos_token_ids;     // config.json's; stop ids unless ignore_eos
  std::optional<ChatFormat> chat_format;  // none: the tokenizer has no chat template
  std::shared_ptr<GrammarVocab> grammar_vocab;  // null: response_format json is refused
};

enum class ApiKind { Completion, Chat };

// OpenAI's largest n.
constexpr int kMaxChoices = 128;

// One prompt of a request: its text (tokenized by encode_prompt once every field is valid: a
// completion's text, or a chat's messages in the chat template) or, without text, the token ids
// it came as.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> ids;  // after encode_prompt: the prompt's token ids
};

struct OpenAiRequest {
  ApiKind kind = ApiKind::Completion;
  // What every choice runs with; each choice's seed is choice_seed's (choice_request).
  GenerateParams params;
  // A completion's prompts (a list gives several), a chat's one. Each prompt has n choices, each
  // its own engine request; choice index = prompt index * n + choice index within the prompt.
  std::vector<PromptInput> prompts;
  int n = 1;
  bool seeded = false;  // "seed" given (else params.sampling.seed is a random one)
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool return_token_ids = false;  // vLLM: prompt_token_ids and token_ids in the response
  std::string request_id;         // the body's vLLM "request_id", if any
  bool export_hidden = false;     // kv_transfer_params given: export the hidden states
  bool include_output_tokens = false;  // kv_transfer_params.include_output_tokens
  std::string max_tokens_param;   // "max_tokens" or "max_completion_tokens": the one given
  // Log-probabilities in the response: -1 none, else the top entries per token (a chat's
  // top_logprobs with logprobs true, a completion's logprobs).
  int logprobs = -1;
  int prompt_logprobs = -1;  // vLLM's prompt_logprobs: -1 none, else the top entries per token
  bool echo = false;         // completions: the prompt comes first in the text (and its logprobs)
  bool add_special_tokens = false;

  int num_choices() const { return int(prompts.size()) * n; }
};

// The seed of choice `choice` (within its prompt) of a request seeded with `seed`: the seed itself
// for choice 0 (so n = 1 is what it always was), else splitmix64(seed + choice).
uint64_t choice_seed(uint64_t seed, int choice);

// The engine request of the request's choice `index` (prompt index * n + choice): its prompt
// (encode_prompt first), the parameters, and its seed: choice_seed of the request's seed, or
// without one a random seed per choice (choice 0 keeps the one parsing drew). Its request_id is
// `rid` for a request of one choice, else "<rid>-<index>".
EngineRequest choice_request(const OpenAiRequest& r, int index, const std::string& rid);

// The body as JSON: refuses bad UTF-8, malformed JSON, nesting deeper than 64 and a non-object.
nlohmann::json parse_json_body(const std::string& body);

// POST /v1/completions and POST /v1/chat/completions: every field read and checked (each by its
// one rule, GenerateParams::validate for the generation fields), the prompt not yet tokenized.
OpenAiRequest parse_completion_request(const nlohmann::json& body, const ServedModel& m);
OpenAiRequest parse_chat_request(const nlohmann::json& body, const ServedModel& m);
// Tokenizes the request's prompts (the last step, when nothing else is left to refuse).
void encode_prompt(OpenAiRequest& r, const ServedModel& m);

// POST /tokenize ({"prompt": str} or {"messages": [...]}) and POST /detokenize ({"tokens": [...]}).
struct TokenizeRequest {
  std::vector<int32_t> tokens;
  bool return_token_strs = false;
};
TokenizeRequest parse_tokenize_request(const nlohmann::json& body, const ServedModel& m);
std::vector<int32_t> parse_detokenize_request(const nlohmann::json& body, const ServedModel& m);

}  // namespace dspark

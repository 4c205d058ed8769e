// vLLM's prefix_repetition prompt set (`vllm bench serve --dataset-name prefix_repetition`):
// prompts that share a few long prefixes, each followed by its own suffix, as several questions
// about one document do. Prefixes and suffixes are cut from a text document by token counts, with
// the server's own tokenizer (POST /tokenize and /detokenize).
#pragma once

#include <string>
#include <vector>

#include "client/server_api.h"

namespace dspark {

struct PrefixRepetition {
  int prefix_len = 256;  // tokens of each shared prefix
  int suffix_len = 32;   // tokens after it, different in every prompt
  int num_prefixes = 4;
  std::string document;  // the text they are cut from (read by the caller)
};

struct PrefixPromptSet {
  std::vector<std::string> run;     // prompt i: prefix i mod num_prefixes, then suffix i
  std::vector<std::string> warmup;  // one per prefix, with suffixes the run does not use
};

// Prefix p is the document's tokens from p * (T / num_prefixes) on (T: the document's token
// count), cyclically; suffix i starts at a different place. Throws Error naming the server and
// endpoint when /tokenize or /detokenize fail, and when the document has no tokens.
PrefixPromptSet prefix_repetition_prompts(const ServerUrl& url, const std::string& api_key,
                                          const std::string& model, const PrefixRepetition& pr,
                                          int num_prompts);

}  // namespace dspark

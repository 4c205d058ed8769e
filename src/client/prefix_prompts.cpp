#include "client/prefix_prompts.h"

#include <cstdint>

#include "core/error.h"

namespace dspark {

namespace {

nlohmann::json post_json(const ServerUrl& url, const std::string& api_key, const std::string& path,
                         const nlohmann::json& body) {
  const HttpReply r = http_post(url, path, body.dump(), api_key, 120);
  if (r.status != 200)
    fail("POST ", url.text(), path, ": ",
         r.status < 0 ? r.body
                      : "status " + std::to_string(r.status) + ": " + r.body.substr(0, 300));
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    fail("POST ", url.text(), path, ": the reply is not a JSON object");
  return j;
}

}  // namespace

PrefixPromptSet prefix_repetition_prompts(const ServerUrl& url, const std::string& api_key,
                                          const std::string& model, const PrefixRepetition& pr,
                                          int num_prompts) {
  const nlohmann::json tj =
      post_json(url, api_key, "/tokenize",
                {{"model", model}, {"prompt", pr.document}, {"add_special_tokens", false}});
  if (!tj.contains("tokens") || !tj["tokens"].is_array())
    fail("POST ", url.text(), "/tokenize: no \"tokens\" in the reply");
  const std::vector<int64_t> doc = tj["tokens"].get<std::vector<int64_t>>();
  if (doc.empty()) fail("prefix_repetition: the document has no tokens");
  const int64_t T = int64_t(doc.size());
  // `n` tokens of the document from `start`, cyclically, as text.
  auto cut = [&](int64_t start, int n) {
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[size_t(i)] = doc[size_t((start + i) % T)];
    const nlohmann::json d =
        post_json(url, api_key, "/detokenize", {{"model", model}, {"tokens", ids}});
    if (!d.contains("prompt") || !d["prompt"].is_string())
      fail("POST ", url.text(), "/detokenize: no \"prompt\" in the reply");
    return d["prompt"].get<std::string>();
  };
  std::vector<std::string> prefixes;
  for (int p = 0; p < pr.num_prefixes; ++p)
    prefixes.push_back(cut(int64_t(p) * (T / pr.num_prefixes), pr.prefix_len));
  // Suffix k from a place that moves by a prime stride, away from its prefix's start.
  auto prompt = [&](int64_t k) {
    const int64_t start = (k * 7919 + T / 2) % T;
    return prefixes[size_t(k % pr.num_prefixes)] + "\n\n" + cut(start, pr.suffix_len);
  };
  PrefixPromptSet out;
  for (int i = 0; i < num_prompts; ++i) out.run.push_back(prompt(i));
  for (int p = 0; p < pr.num_prefixes; ++p) out.warmup.push_back(prompt(int64_t(num_prompts) + p));
  return out;
}

}  // namespace dspark

#include "server/openai_logprobs.h"

#include <algorithm>

#include "core/error.h"

namespace dspark {

using json = nlohmann::ordered_json;

namespace {

// OpenAI's stand-in for -inf, which JSON cannot hold.
constexpr float kLogprobFloor = -9999.f;

float shown(float lp) {
  return lp > kLogprobFloor ? lp : kLogprobFloor;
}

std::string raw_bytes(const Tokenizer& tok, int32_t id) {
  if (id < 0 || id >= tok.vocab_size()) return "";
  try {
    return tok.token_bytes(id);
  } catch (const Error&) {
    return "";
  }
}

json bytes_json(const std::string& b) {
  json::array_t a;
  a.reserve(b.size());
  for (unsigned char c : b) a.emplace_back(int(c));
  return json(std::move(a));
}

// One chat entry {token, logprob, bytes[, top_logprobs]}, its nodes built in place (no
// initializer-list copies): a response with top_logprobs 5 holds six of these per token.
json chat_entry(const Tokenizer& tok, int32_t id, float lp) {
  json::object_t o;
  o.reserve(4);
  o.emplace_back("token", token_string(tok, id));
  o.emplace_back("logprob", shown(lp));
  o.emplace_back("bytes", bytes_json(raw_bytes(tok, id)));
  return json(std::move(o));
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::string token_string(const Tokenizer& tok, int32_t id) {
  if (id < 0 || id >= tok.vocab_size()) return "";
  try {
    return tok.decode(std::span<const int32_t>(&id, 1));
  } catch (const Error&) {
    return "";
  }
}

json chat_logprobs(const Logprobs& lp, int top_n, const Tokenizer& tok) {
  top_n = std::min(top_n, lp.top_n);
  json::array_t content;
  content.reserve(lp.size());
  for (size_t i = 0; i < lp.size(); ++i) {
    json::array_t top;
    top.reserve(size_t(top_n));
    for (int k = 0; k < top_n; ++k) top.push_back(chat_entry(tok, lp.top_tokens(i)[k], lp.top_logprobs(i)[k]));
    json e = chat_entry(tok, lp.token[i], lp.logprob[i]);
    e.get_ref<json::object_t&>().emplace_back("top_logprobs", json(std::move(top)));
    content.push_back(std::move(e));
  }
  json out = json::object();
  out.get_ref<json::object_t&>().emplace_back("content", json(std::move(content)));
  return out;
}

void CompletionLogprobs::entry(int32_t token, const float* logprob, const int32_t* top_ids,
                               const float* top_lps, int top_n) {
  const std::string s = token_string(tok_, token);
  tokens_.push_back(s);
  offsets_.push_back(offset_);
  offset_ += code_points(s);
  if (!logprob) {
    logprobs_.push_back(nullptr);
    top_.push_back(nullptr);
    return;
  }
  logprobs_.push_back(shown(*logprob));
  json top = json::object();
  top[s] = shown(*logprob);
  for (int k = 0; k < top_n; ++k) {
    std::string t = token_string(tok_, top_ids[k]);
    if (!top.contains(t)) top[t] = shown(top_lps[k]);
  }
  top_.push_back(std::move(top));
}

void CompletionLogprobs::add_prompt(std::span<const int32_t> prompt, const Logprobs& plp) {
  const int top_n = std::min(top_n_, plp.top_n);
  for (size_t p = 0; p < prompt.size(); ++p) {
    if (p == 0 || p - 1 >= plp.size())
      entry(prompt[p], nullptr, nullptr, nullptr, 0);
    else
      entry(prompt[p], &plp.logprob[p - 1], plp.top_tokens(p - 1), plp.top_logprobs(p - 1), top_n);
  }
}

void CompletionLogprobs::add(const Logprobs& lp) {
  const int top_n = std::min(top_n_, lp.top_n);
  for (size_t i = 0; i < lp.size(); ++i)
    entry(lp.token[i], &lp.logprob[i], lp.top_tokens(i), lp.top_logprobs(i), top_n);
}

json CompletionLogprobs::take() {
  json out = {{"tokens", std::move(tokens_)},
              {"token_logprobs", std::move(logprobs_)},
              {"top_logprobs", std::move(top_)},
              {"text_offset", std::move(offsets_)}};
  tokens_ = logprobs_ = top_ = offsets_ = json::array();
  return out;
}

json prompt_logprobs_json(std::span<const int32_t> prompt, const Logprobs& plp, int top_n,
                          const Tokenizer& tok) {
  top_n = std::min(top_n, plp.top_n);
  json out = json::array();
  if (!prompt.empty()) out.push_back(nullptr);
  for (size_t i = 0; i < plp.size() && i + 1 < prompt.size(); ++i) {
    json e = json::object();
    auto add = [&](int32_t id, float lp, int rank) {
      const std::string key = std::to_string(id);
      if (e.contains(key)) return;
      e[key] = {{"logprob", shown(lp)}, {"rank", rank}, {"decoded_token", token_string(tok, id)}};
    };
    add(plp.token[i], plp.logprob[i], plp.rank[i]);
    for (int k = 0; k < top_n; ++k) add(plp.top_tokens(i)[k], plp.top_logprobs(i)[k], k + 1);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace dspark

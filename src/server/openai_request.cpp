#include "server/openai_request.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <random>

#include "core/error.h"
#include "core/rng.h"
#include "server/errors.h"
#include "tokenizer/unicode_util.h"

namespace dspark {

using nlohmann::json;

namespace {

constexpr int kMaxJsonDepth = 64;
constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// How a known field is treated.
enum class Field {
  Handled,  // read below
  Ignored,  // accepted with any value (bookkeeping fields such as "user")
  Neutral,  // accepted only at a value that changes nothing (null or one listed in kNeutral)
};

// Values of unsupported fields that leave the request unchanged (null is always accepted).
const std::map<std::string, std::vector<json>>& neutral_values() {
  static const std::map<std::string, std::vector<json>> v = {
      {"best_of", {1}},
      {"echo", {false}},
      {"length_penalty", {1}},
      {"suffix", {""}},
      {"min_tokens", {0}},
      {"include_stop_str_in_output", {false}},
      {"use_beam_search", {false}},
      {"truncate_prompt_tokens", {}},
      {"allowed_token_ids", {}},
      {"bad_words", {json::array()}},
      {"tools", {json::array()}},
      {"tool_choice", {"none", "auto"}},
      {"functions", {json::array()}},
      {"function_call", {"none", "auto"}},
      {"continue_final_message", {false}},
      {"chat_template", {}},
      {"documents", {}},
      {"skip_special_tokens", {true}},
      {"return_tokens_as_token_ids", {false}},
      {"logits_processors", {}},
      {"structured_outputs", {}},
      {"guided_json", {}},
      {"guided_regex", {}},
      {"guided_choice", {}},
      {"guided_grammar", {}},
      {"reasoning_effort", {}},
      {"modalities", {json::array({"text"})}},
      {"prediction", {}},
      {"audio", {}},
      {"web_search_options", {}},
      {"mm_processor_kwargs", {}},
  };
  return v;
}

using FieldTable = std::map<std::string, Field>;

FieldTable common_fields() {
  FieldTable t;
  for (const char* k :
       {"model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
        "stop_token_ids", "n", "stream", "stream_options", "ignore_eos", "return_token_ids",
        "request_id", "kv_transfer_params", "logprobs", "prompt_logprobs"})
    t[k] = Field::Handled;
  for (const char* k :
       {"presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "response_format"})
    t[k] = Field::Handled;
  for (const char* k : {"user", "priority", "cache_salt", "vllm_xargs",
                        "spaces_between_special_tokens", "metadata", "store", "service_tier"})
    t[k] = Field::Ignored;
  for (const char* k : {"best_of",
                        "length_penalty",
                        "min_tokens",
                        "include_stop_str_in_output",
                        "use_beam_search",
                        "truncate_prompt_tokens",
                        "allowed_token_ids",
                        "bad_words",
                        "skip_special_tokens",
                        "return_tokens_as_token_ids",
                        "logits_processors",
                        "structured_outputs",
                        "guided_json",
                        "guided_regex",
                        "guided_choice",
                        "guided_grammar"})
    t[k] = Field::Neutral;
  return t;
}

const FieldTable& completion_fields() {
  static const FieldTable t = [] {
    FieldTable t = common_fields();
    t["prompt"] = Field::Handled;
    t["add_special_tokens"] = Field::Handled;
    t["echo"] = Field::Handled;
    t["suffix"] = Field::Neutral;
    return t;
  }();
  return t;
}

const FieldTable& chat_fields() {
  static const FieldTable t = [] {
    FieldTable t = common_fields();
    for (const char* k : {"messages", "max_completion_tokens", "add_generation_prompt",
                          "add_special_tokens", "top_logprobs"})
      t[k] = Field::Handled;
    for (const char* k : {"chat_template_kwargs", "parallel_tool_calls"}) t[k] = Field::Ignored;
    for (const char* k :
         {"echo", "tools", "tool_choice", "functions", "function_call", "continue_final_message",
          "chat_template", "documents", "reasoning_effort", "modalities", "prediction", "audio",
          "web_search_options", "mm_processor_kwargs"})
      t[k] = Field::Neutral;
    return t;
  }();
  return t;
}

std::string short_dump(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Refuses fields the endpoint does not know (as OpenAI does) and unsupported features asked for.
void check_fields(const json& body, const FieldTable& table) {
  for (const auto& [key, value] : body.items()) {
    auto it = table.find(key);
    if (it == table.end()) throw bad_request("unrecognized request argument: " + key, key);
    if (it->second != Field::Neutral || value.is_null()) continue;
    bool ok = false;
    auto nv = neutral_values().find(key);
    if (nv != neutral_values().end())
      for (const json& n : nv->second) ok = ok || value == n;
    if (!ok)
      throw bad_request(key + "=" + short_dump(value) + " is not supported by this server", key);
  }
}

// A field's value, or null when absent (OpenAI treats an explicit null as absent).
const json& field(const json& body, const char* name) {
  static const json null_value;
  auto it = body.find(name);
  return it == body.end() ? null_value : *it;
}

const char* type_name(const json& v) {
  using T = json::value_t;
  static const std::map<T, const char*> kNames = {
      {T::null, "null"},           {T::boolean, "a boolean"},         {T::string, "a string"},
      {T::array, "an array"},      {T::object, "an object"},          {T::number_integer, "an integer"},
      {T::number_unsigned, "an integer"}, {T::number_float, "a number"}};
  auto it = kNames.find(v.type());
  return it == kNames.end() ? "an invalid value" : it->second;
}

[[noreturn]] void wrong_type(const std::string& name, const char* want, const json& v) {
  throw bad_request("'" + name + "' must be " + want + ", got " + type_name(v), name);
}

std::optional<bool> get_bool(const json& body, const char* name) {
  const json& v = field(body, name);
  if (v.is_null()) return std::nullopt;
  if (!v.is_boolean()) wrong_type(name, "a boolean", v);
  return v.get<bool>();
}

// An integer (a float with no fraction counts, as pydantic accepts it) within [lo, hi].
int64_t as_integer(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max()))
      throw bad_request(
          "'" + name + "' must be at most " + std::to_string(hi) + ", got " + v.dump(), name);
    x = int64_t(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) wrong_type(name, "an integer", v);
    if (d < double(lo) || d > double(hi))
      throw bad_request("'" + name + "' must be in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "], got " + v.dump(),
                        name);
    x = int64_t(d);
  } else {
    wrong_type(name, "an integer", v);
  }
  if (x < lo || x > hi)
    throw bad_request("'" + name + "' must be in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "], got " + std::to_string(x),
                      name);
  return x;
}

std::optional<int64_t> get_integer(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json& v = field(body, name);
  if (v.is_null()) return std::nullopt;
  return as_integer(v, name, lo, hi);
}

// A number; its range is the field's rule's (GenerateParams::validate).
std::optional<double> get_number(const json& body, const char* name) {
  const json& v = field(body, name);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) wrong_type(name, "a number", v);
  return v.get<double>();
}

void check_model(const json& body, const ServedModel& m) {
  const json& v = field(body, "model");
  if (v.is_null()) return;  // vLLM: the served model by default
  if (!v.is_string()) wrong_type("model", "a string", v);
  const std::string name = v.get<std::string>();
  if (name != m.name)
    throw Error("The model `" + name + "` does not exist.", ErrorKind::NotFound, "model");
}

uint64_t random_seed() {
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  return gen();
}

std::vector<int32_t> token_ids(const json& v, const std::string& name, const ServedModel& m) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    ids.push_back(int32_t(as_integer(v[i], name + "[" + std::to_string(i) + "]", kInt32Min, kInt32Max)));
  check_token_ids(ids, m.vocab_size, name);
  return ids;
}

bool all_integers(const json& a) {
  for (const json& e : a)
    if (!e.is_number()) return false;
  return true;
}

// Sampling, stop conditions, n and streaming: the fields both generation endpoints share, read
// (their values' ranges are GenerateParams::validate's, checked once every field is read).
void parse_common(const json& body, const ServedModel& m, OpenAiRequest& r) {
  GenerateParams& p = r.params;
  SamplingParams& s = p.sampling;
  s.temperature = float(get_number(body, "temperature").value_or(1.0));
  s.top_p = float(get_number(body, "top_p").value_or(1.0));
  // vLLM: -1 (or 0) disables top-k.
  const int64_t top_k = get_integer(body, "top_k", kInt32Min, kInt32Max).value_or(0);
  s.top_k = top_k == -1 ? 0 : int(top_k);
  s.min_p = float(get_number(body, "min_p").value_or(0.0));
  if (auto seed = get_integer(body, "seed", std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max())) {
    s.seed = uint64_t(*seed);
    r.seeded = true;
  } else {
    s.seed = random_seed();  // OpenAI: no seed, no reproducibility promise
  }
  r.n = int(get_integer(body, "n", 1, kMaxChoices).value_or(1));

  const json& stop = field(body, "stop");
  if (stop.is_string()) {
    p.stop_strings.push_back(stop.get<std::string>());
  } else if (stop.is_array()) {
    for (size_t i = 0; i < stop.size(); ++i) {
      if (!stop[i].is_string()) wrong_type("stop[" + std::to_string(i) + "]", "a string", stop[i]);
      p.stop_strings.push_back(stop[i].get<std::string>());
    }
  } else if (!stop.is_null()) {
    wrong_type("stop", "a string or an array of strings", stop);
  }

  const bool ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  if (!ignore_eos) p.stop_token_ids = m.eos_token_ids;
  const json& stop_ids = field(body, "stop_token_ids");
  if (!stop_ids.is_null()) {
    if (!stop_ids.is_array()) wrong_type("stop_token_ids", "an array of token ids", stop_ids);
    for (int32_t id : token_ids(stop_ids, "stop_token_ids", m)) p.stop_token_ids.push_back(id);
  }

  r.stream = get_bool(body, "stream").value_or(false);
  const json& so = field(body, "stream_options");
  if (!so.is_null()) {
    if (!so.is_object()) wrong_type("stream_options", "an object", so);
    if (!r.stream)
      throw bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    for (const auto& [key, value] : so.items()) {
      if (key == "include_usage") {
        if (!value.is_null() && !value.is_boolean())
          wrong_type("stream_options.include_usage", "a boolean", value);
        r.include_usage = value.is_boolean() && value.get<bool>();
      } else if (key == "continuous_usage_stats") {
        if (!value.is_null() && value != json(false))
          throw bad_request("stream_options.continuous_usage_stats is not supported",
                            "stream_options");
      } else {
        throw bad_request("unrecognized request argument: stream_options." + key, "stream_options");
      }
    }
  }
  r.return_token_ids = get_bool(body, "return_token_ids").value_or(false);
  // vLLM's kv_transfer_params: with the hidden-states connector, an object asks for export;
  // include_output_tokens also exports the output's positions.
  const json& kvp = field(body, "kv_transfer_params");
  if (!kvp.is_null()) {
    if (!kvp.is_object()) wrong_type("kv_transfer_params", "an object", kvp);
    r.export_hidden = true;
    if (kvp.contains("include_output_tokens")) {
      const json& v = kvp["include_output_tokens"];
      if (!v.is_boolean()) wrong_type("kv_transfer_params.include_output_tokens", "a boolean", v);
      r.include_output_tokens = v.get<bool>();
    }
  }
  const json& rid = field(body, "request_id");
  if (!rid.is_null()) {
    if (!rid.is_string()) wrong_type("request_id", "a string", rid);
    r.request_id = rid.get<std::string>();
    if (r.request_id.size() > 256)
      throw bad_request("'request_id' is longer than 256 bytes", "request_id");
  }
}

// max_tokens (or its chat name): kAsManyAsFit when absent (vLLM's default), else at least 1
// (check_max_tokens), or 0 with echo (the prompt scored, nothing generated). The engine refuses a
// prompt plus max_tokens over the context.
void parse_max_tokens(const json& body, const std::vector<const char*>& names, OpenAiRequest& r) {
  r.max_tokens_param = names.front();
  r.params.max_tokens = kAsManyAsFit;
  for (const char* name : names) {
    if (auto v = get_integer(body, name, kInt32Min, kInt32Max)) {
      if (*v == 0 && !r.echo && r.kind == ApiKind::Completion)
        throw bad_request(std::string("'") + name +
                              "' 0 is allowed only with 'echo' (to score the prompt); otherwise "
                              "it must be at least 1",
                          name);
      if (*v != 0 || !r.echo) check_max_tokens(*v, name);
      r.params.max_tokens = int(*v);
      r.max_tokens_param = name;
      return;
    }
  }
}

std::vector<int32_t> encode_text(const ServedModel& m, const std::string& text, bool add_special,
                                 const char* param) {
  try {
    return m.tok->encode(text, add_special);
  } catch (const Error& e) {
    throw bad_request(std::string("'") + param + "' could not be tokenized: " + e.what(), param);
  }
}

// The text of a message's content: a string, or text parts joined by newlines (as vLLM does).
std::string message_content(const json& content, const std::string& where, bool may_be_null) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) {
    if (may_be_null) return "";
    throw bad_request("'" + where + "' is required", where);
  }
  if (!content.is_array()) wrong_type(where, "a string or an array of content parts", content);
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string pw = where + "[" + std::to_string(j) + "]";
    if (!part.is_object()) wrong_type(pw, "an object", part);
    const json& type = field(part, "type");
    if (!type.is_string()) wrong_type(pw + ".type", "a string", type);
    if (type.get<std::string>() != "text")
      throw bad_request(
          "content parts of type '" + type.get<std::string>() + "' are not supported (only 'text')",
          pw + ".type");
    for (const auto& [key, value] : part.items())
      if (key != "type" && key != "text")
        throw bad_request("unrecognized request argument: " + pw + "." + key, pw + "." + key);
    const json& t = field(part, "text");
    if (!t.is_string()) wrong_type(pw + ".text", "a string", t);
    if (j) text += "\n";
    text += t.get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> parse_messages(const json& body) {
  const json& msgs = field(body, "messages");
  if (msgs.is_null()) throw bad_request("'messages' is required", "messages");
  if (!msgs.is_array()) wrong_type("messages", "an array", msgs);
  if (msgs.empty()) throw bad_request("'messages' must not be empty", "messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const json& msg = msgs[i];
    if (!msg.is_object()) wrong_type(where, "an object", msg);
    for (const auto& [key, value] : msg.items()) {
      if (key == "role" || key == "content" || key == "name") continue;
      // Fields of tool use and reasoning: only their empty forms.
      if ((key == "tool_calls" || key == "function_call" || key == "refusal" ||
           key == "reasoning_content" || key == "reasoning" || key == "audio") &&
          (value.is_null() || (value.is_array() && value.empty())))
        continue;
      throw bad_request("unrecognized request argument: " + where + "." + key, where + "." + key);
    }
    const json& role = field(msg, "role");
    if (!role.is_string()) wrong_type(where + ".role", "a string", role);
    std::string r = role.get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    if (r != "system" && r != "user" && r != "assistant")
      throw bad_request("role '" + role.get<std::string>() +
                            "' is not supported (system, developer, user, assistant)",
                        where + ".role");
    const json& name = field(msg, "name");
    if (!name.is_null() && !name.is_string()) wrong_type(where + ".name", "a string", name);
    out.push_back(
        {r, message_content(field(msg, "content"), where + ".content", r == "assistant")});
  }
  return out;
}

ChatFormat chat_format(const ServedModel& m) {
  if (!m.chat_format)
    throw bad_request("this model's tokenizer has no chat template; use /v1/completions",
                      "messages");
  return *m.chat_format;
}

// What both generation endpoints check first: the fields the endpoint knows, and the model.
OpenAiRequest new_request(ApiKind kind, const json& body, const FieldTable& fields,
                          const ServedModel& m) {
  check_fields(body, fields);
  check_model(body, m);
  OpenAiRequest r;
  r.kind = kind;
  return r;
}

// logprobs (a completion's count; a chat's boolean with top_logprobs), echo and vLLM's
// prompt_logprobs. Read after parse_common (stream).
void parse_logprobs(const json& body, OpenAiRequest& r) {
  const json& lp = field(body, "logprobs");
  if (r.kind == ApiKind::Completion) {
    if (lp.is_boolean() && lp.get<bool>())
      wrong_type("logprobs", "an integer in [0, 20] (the top entries per token)", lp);
    if (!lp.is_null() && !lp.is_boolean())
      r.logprobs = int(as_integer(lp, "logprobs", 0, kMaxLogprobs));
    r.echo = get_bool(body, "echo").value_or(false);
  } else {
    const bool on = get_bool(body, "logprobs").value_or(false);
    const std::optional<int64_t> top = get_integer(body, "top_logprobs", 0, kMaxLogprobs);
    if (top && *top > 0 && !on)
      throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (on) r.logprobs = int(top.value_or(0));
  }
  if (auto n = get_integer(body, "prompt_logprobs", 0, kMaxLogprobs)) {
    if (r.stream)
      throw bad_request("'prompt_logprobs' is not available when 'stream' is true",
                        "prompt_logprobs");
    r.prompt_logprobs = int(*n);
  }
}

// response_format (response_format_grammar) with the served tokenizer's bytes.
void parse_response_format(const json& body, const ServedModel& m, LogitsParams& lp) {
  lp.grammar = response_format_grammar(field(body, "response_format"));
  if (!lp.grammar) return;
  if (!m.grammar_vocab) throw bad_request("response_format needs the tokenizer's bytes", "response_format");
  lp.grammar_vocab = m.grammar_vocab->get();
}

// logit_bias and the penalties (their ranges are LogitsParams::validate's).
void parse_logits_params(const json& body, const ServedModel& m, LogitsParams& lp) {
  lp.presence_penalty = float(get_number(body, "presence_penalty").value_or(0.0));
  lp.frequency_penalty = float(get_number(body, "frequency_penalty").value_or(0.0));
  lp.repetition_penalty = float(get_number(body, "repetition_penalty").value_or(1.0));
  const json& bias = field(body, "logit_bias");
  if (!bias.is_null()) {
    if (!bias.is_object()) wrong_type("logit_bias", "an object of token ids to numbers", bias);
    for (const auto& [key, v] : bias.items()) {
      // OpenAI's keys are token ids as strings.
      char* end = nullptr;
      errno = 0;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || errno == ERANGE || id < kInt32Min || id > kInt32Max)
        throw bad_request("'logit_bias' keys must be token ids, got \"" + key + "\"", "logit_bias");
      if (!v.is_number()) wrong_type("logit_bias[\"" + key + "\"]", "a number", v);
      lp.logit_bias.emplace_back(int32_t(id), float(v.get<double>()));
    }
  }
  lp.validate(m.vocab_size);
  parse_response_format(body, m, lp);
}

// ... and last, the generation fields (max_tokens under its `max_names`), each then checked by
// its one rule (GenerateParams::validate).
void parse_generation(const json& body, const ServedModel& m,
                      const std::vector<const char*>& max_names, OpenAiRequest& r) {
  parse_common(body, m, r);
  parse_logprobs(body, r);
  parse_logits_params(body, m, r.params.logits_params);
  parse_max_tokens(body, max_names, r);
  if (r.export_hidden && r.num_choices() > 1)
    throw bad_request(
        "'kv_transfer_params' (a hidden-state export) needs one choice: n 1 and a single prompt",
        "kv_transfer_params");
  GenerateParams& p = r.params;
  p.logprobs = r.logprobs;
  // The engine scores the prompt for prompt_logprobs, for echo with logprobs (vLLM), and to end
  // an echo of max_tokens 0.
  p.prompt_logprobs = r.prompt_logprobs;
  if (r.echo && r.logprobs >= 0) p.prompt_logprobs = std::max(p.prompt_logprobs, r.logprobs);
  if (r.echo && p.max_tokens == 0) p.prompt_logprobs = std::max(p.prompt_logprobs, 0);
  p.validate();
}

// The messages in the chat template: the text a chat's prompt is tokenized from.
std::string chat_text(const json& body, const ServedModel& m) {
  std::vector<ChatMessage> msgs = parse_messages(body);
  const ChatFormat fmt = chat_format(m);
  const bool add_gen = get_bool(body, "add_generation_prompt").value_or(true);
  return apply_chat_template(fmt, msgs, add_gen);
}

bool chat_add_special_tokens(const json& body) {
  return get_bool(body, "add_special_tokens").value_or(false);
}

// A completion's prompt: a string, an array of token ids, or a list of prompts (all strings, or
// all arrays of token ids).
std::vector<PromptInput> completion_prompts(const json& prompt, const ServedModel& m) {
  if (prompt.is_null()) throw bad_request("'prompt' is required", "prompt");
  if (prompt.is_string()) return {{prompt.get<std::string>(), {}}};
  if (!prompt.is_array())
    wrong_type("prompt", "a string, an array of token ids, or an array of prompts", prompt);
  if (prompt.empty()) throw bad_request("'prompt' must not be empty", "prompt");
  if (all_integers(prompt)) return {{std::nullopt, token_ids(prompt, "prompt", m)}};
  std::vector<PromptInput> out;
  const bool strings = prompt[0].is_string();
  for (size_t i = 0; i < prompt.size(); ++i) {
    const json& p = prompt[i];
    const std::string where = "prompt[" + std::to_string(i) + "]";
    if (strings && !p.is_string())
      throw bad_request("'prompt' mixes strings and token-id arrays (or holds " +
                            std::string(type_name(p)) + " at " + where + "): give one kind",
                        "prompt");
    if (strings) {
      out.push_back({p.get<std::string>(), {}});
      continue;
    }
    if (!p.is_array() || !all_integers(p))
      throw bad_request("'prompt' must be a string, an array of token ids, or an array of "
                            "strings or of token-id arrays; " + where + " is " + type_name(p),
                        "prompt");
    if (p.empty()) throw bad_request("'" + where + "' must not be empty", "prompt");
    out.push_back({std::nullopt, token_ids(p, where, m)});
  }
  return out;
}

}  // namespace

std::shared_ptr<const TokenVocab> GrammarVocab::get() const {
  std::call_once(once_, [&] { vocab_ = TokenVocab::build(tok_, eos_); });
  return vocab_;
}

json parse_json_body(const std::string& body) {
  if (!tokenizer_detail::is_valid_utf8(body))
    throw bad_request("the request body is not valid UTF-8");
  if (body.empty()) throw bad_request("the request body is empty: a JSON object is expected");
  json j;
  try {
    bool too_deep = false;
    j = json::parse(body, [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) too_deep = true;
      return !too_deep;
    });
    if (too_deep)
      throw bad_request("the request JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                        " levels");
  } catch (const json::exception& e) {
    throw bad_request(std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object())
    throw bad_request(std::string("the request body must be a JSON object, got ") + type_name(j));
  return j;
}

OpenAiRequest parse_completion_request(const json& body, const ServedModel& m) {
  OpenAiRequest r = new_request(ApiKind::Completion, body, completion_fields(), m);
  r.add_special_tokens = get_bool(body, "add_special_tokens").value_or(true);
  r.prompts = completion_prompts(field(body, "prompt"), m);
  parse_generation(body, m, {"max_tokens"}, r);
  return r;
}

OpenAiRequest parse_chat_request(const json& body, const ServedModel& m) {
  OpenAiRequest r = new_request(ApiKind::Chat, body, chat_fields(), m);
  r.prompts.push_back({chat_text(body, m), {}});
  r.add_special_tokens = chat_add_special_tokens(body);
  parse_generation(body, m, {"max_completion_tokens", "max_tokens"}, r);
  // The chat template's end-of-turn tokens end the answer (unless the client ignores EOS).
  if (!get_bool(body, "ignore_eos").value_or(false))
    for (int32_t id : chat_stop_tokens(*m.tok, chat_format(m)))
      r.params.stop_token_ids.push_back(id);
  return r;
}

void encode_prompt(OpenAiRequest& r, const ServedModel& m) {
  const std::string param = r.kind == ApiKind::Chat ? "messages" : "prompt";
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    PromptInput& p = r.prompts[i];
    const std::string where = r.prompts.size() > 1 ? param + "[" + std::to_string(i) + "]" : param;
    if (p.text) p.ids = encode_text(m, *p.text, r.add_special_tokens, param.c_str());
    if (p.ids.empty()) throw bad_request("'" + where + "' encodes to no tokens", param);
  }
}

uint64_t choice_seed(uint64_t seed, int choice) {
  if (choice == 0) return seed;
  uint64_t x = seed + uint64_t(choice);
  return splitmix64(x);
}

EngineRequest choice_request(const OpenAiRequest& r, int index, const std::string& rid) {
  const int choice = index % r.n;
  EngineRequest e;
  e.request_id = r.num_choices() == 1 ? rid : rid + "-" + std::to_string(index);
  e.prompt = r.prompts[size_t(index / r.n)].ids;
  e.params = r.params;
  if (choice > 0)
    e.params.sampling.seed = r.seeded ? choice_seed(r.params.sampling.seed, choice) : random_seed();
  return e;
}

TokenizeRequest parse_tokenize_request(const json& body, const ServedModel& m) {
  static const FieldTable table = {{"model", Field::Handled},
                                   {"prompt", Field::Handled},
                                   {"messages", Field::Handled},
                                   {"add_special_tokens", Field::Handled},
                                   {"add_generation_prompt", Field::Handled},
                                   {"return_token_strs", Field::Handled},
                                   {"continue_final_message", Field::Neutral},
                                   {"chat_template", Field::Neutral},
                                   {"chat_template_kwargs", Field::Ignored},
                                   {"tools", Field::Neutral},
                                   {"mm_processor_kwargs", Field::Neutral}};
  check_fields(body, table);
  check_model(body, m);
  TokenizeRequest r;
  r.return_token_strs = get_bool(body, "return_token_strs").value_or(false);
  const json& prompt = field(body, "prompt");
  const bool has_messages = !field(body, "messages").is_null();
  if (!prompt.is_null() && has_messages)
    throw bad_request("give 'prompt' or 'messages', not both", "prompt");
  if (has_messages) {
    r.tokens = encode_text(m, chat_text(body, m), chat_add_special_tokens(body), "messages");
  } else {
    if (prompt.is_null()) throw bad_request("'prompt' or 'messages' is required", "prompt");
    if (!prompt.is_string()) wrong_type("prompt", "a string", prompt);
    r.tokens = encode_text(m, prompt.get<std::string>(),
                           get_bool(body, "add_special_tokens").value_or(true), "prompt");
  }
  return r;
}

std::vector<int32_t> parse_detokenize_request(const json& body, const ServedModel& m) {
  check_fields(body, {{"model", Field::Handled}, {"tokens", Field::Handled}});
  check_model(body, m);
  const json& tokens = field(body, "tokens");
  if (tokens.is_null()) throw bad_request("'tokens' is required", "tokens");
  if (!tokens.is_array()) wrong_type("tokens", "an array of token ids", tokens);
  return token_ids(tokens, "tokens", m);
}

}  // namespace dspark

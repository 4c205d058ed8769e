#include "server/openai_response.h"

#include <chrono>

namespace dspark {

// ordered_json: objects keep the field order OpenAI writes (id, object, created, model, ...).
using json = nlohmann::ordered_json;

ResponseMeta make_response_meta(ApiKind kind, const std::string& request_id,
                                const std::string& model, bool return_token_ids,
                                std::vector<int32_t> prompt_token_ids) {
  ResponseMeta m;
  m.kind = kind;
  m.id = (kind == ApiKind::Chat ? "chatcmpl-" : "cmpl-") + request_id;  // as vLLM names them
  m.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  m.model = model;
  m.return_token_ids = return_token_ids;
  m.prompt_token_ids = std::move(prompt_token_ids);
  return m;
}

json usage_json(int prompt_tokens, int completion_tokens, int cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

namespace {

json finish_value(const std::string& reason) {
  return reason.empty() ? json() : json(reason);
}

}  // namespace

json stop_reason_value(const RequestOutput& out) {
  if (out.stop_token >= 0) return out.stop_token;
  if (!out.stop_string.empty()) return out.stop_string;
  return nullptr;
}

json completion_response(const ResponseMeta& meta, const std::string& text,
                         const std::vector<int32_t>& token_ids, const ResponseLogprobs& lp,
                         const std::string& finish_reason, const json& stop_reason,
                         int prompt_tokens, int completion_tokens, int cached_tokens) {
  json out = {{"id", meta.id},
              {"object", meta.kind == ApiKind::Chat ? "chat.completion" : "text_completion"},
              {"created", meta.created},
              {"model", meta.model}};
  json choice = {{"index", 0}};
  json logprobs;
  if (meta.kind == ApiKind::Chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
    if (meta.logprobs >= 0) logprobs = chat_logprobs(lp.tokens, meta.logprobs, *meta.tok);
  } else {
    choice["text"] = meta.echo ? meta.echo_text + text : text;
    if (meta.logprobs >= 0) {
      CompletionLogprobs c(*meta.tok, meta.logprobs);
      if (meta.echo) c.add_prompt(meta.prompt, lp.prompt);
      c.add(lp.tokens);
      logprobs = c.take();
    }
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_value(finish_reason);
  choice["stop_reason"] = stop_reason;
  if (meta.prompt_logprobs >= 0) {
    // vLLM: in the choice for completions, at the top level for chat.
    json plp = prompt_logprobs_json(meta.prompt, lp.prompt, meta.prompt_logprobs, *meta.tok);
    if (meta.kind == ApiKind::Chat)
      out["prompt_logprobs"] = std::move(plp);
    else
      choice["prompt_logprobs"] = std::move(plp);
  }
  if (meta.return_token_ids) {
    // vLLM: the prompt's ids at the top level for chat, in the choice for completions.
    if (meta.kind == ApiKind::Chat)
      out["prompt_token_ids"] = meta.prompt_token_ids;
    else
      choice["prompt_token_ids"] = meta.prompt_token_ids;
    choice["token_ids"] = token_ids;
  }
  out["choices"] = json::array({std::move(choice)});
  out["usage"] = usage_json(prompt_tokens, completion_tokens, cached_tokens);
  if (!meta.kv_transfer_params.is_null()) out["kv_transfer_params"] = meta.kv_transfer_params;
  return out;
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& j) {
  return "data: " + dump_json(j) + "\n\n";
}

StreamFormatter::StreamFormatter(ResponseMeta meta, bool include_usage)
    : meta_(std::move(meta)), include_usage_(include_usage) {
  if (meta_.kind == ApiKind::Completion && meta_.logprobs >= 0)
    legacy_ = std::make_unique<CompletionLogprobs>(*meta_.tok, meta_.logprobs);
}

// The held entries in the endpoint's shape (null without logprobs), then forgotten.
json StreamFormatter::logprobs_value() {
  json v;
  if (meta_.logprobs < 0) return v;
  if (meta_.kind == ApiKind::Chat) {
    v = chat_logprobs(held_.tokens, meta_.logprobs, *meta_.tok);
  } else {
    if (first_ && meta_.echo) legacy_->add_prompt(meta_.prompt, held_.prompt);
    legacy_->add(held_.tokens);
    v = legacy_->take();
  }
  held_.clear();
  return v;
}

json StreamFormatter::chunk(json choice) const {
  json c = {{"id", meta_.id},
            {"object", meta_.kind == ApiKind::Chat ? "chat.completion.chunk" : "text_completion"},
            {"created", meta_.created},
            {"model", meta_.model},
            {"choices", json::array({std::move(choice)})}};
  if (include_usage_) c["usage"] = nullptr;  // OpenAI: null on every chunk but the last
  return c;
}

// vLLM: kv_transfer_params with the response's end (the last chunk of a stream).
json StreamFormatter::with_transfer(json c, bool last) const {
  if (last && !meta_.kv_transfer_params.is_null()) c["kv_transfer_params"] = meta_.kv_transfer_params;
  return c;
}

std::string StreamFormatter::on_output(const RequestOutput& out) {
  if (finished_) return "";
  held_.add(out);
  const bool has_ids = meta_.return_token_ids && !out.token_ids.empty();
  const bool echo_now = first_ && meta_.echo;
  // A step whose text is held back (a partial character, a possible stop string) sends nothing.
  if (out.text.empty() && !has_ids && !out.finished && !echo_now) return "";
  std::string events;
  const json finish = out.finished ? finish_value(out.finish_reason) : json();
  if (meta_.kind == ApiKind::Chat) {
    if (first_) {
      // The role chunk goes out with the first output, so a client's TTFT is the first token's.
      json delta = {{"role", "assistant"}, {"content", ""}};
      json choice = {
          {"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
      json c = chunk(std::move(choice));
      if (meta_.return_token_ids) c["prompt_token_ids"] = meta_.prompt_token_ids;
      events += sse_event(c);
    }
    json delta = json::object();
    if (!out.text.empty() || !out.finished) delta["content"] = out.text;
    json choice = {{"index", 0},
                   {"delta", std::move(delta)},
                   {"logprobs", logprobs_value()},
                   {"finish_reason", finish}};
    if (out.finished) choice["stop_reason"] = stop_reason_value(out);
    if (meta_.return_token_ids) choice["token_ids"] = out.token_ids;
    events += sse_event(with_transfer(chunk(std::move(choice)), out.finished));
  } else {
    json choice = {{"index", 0},
                   {"text", echo_now ? meta_.echo_text + out.text : out.text},
                   {"logprobs", logprobs_value()},
                   {"finish_reason", finish}};
    if (out.finished) choice["stop_reason"] = stop_reason_value(out);
    if (meta_.return_token_ids) {
      if (first_)
        choice["prompt_token_ids"] = meta_.prompt_token_ids;  // vLLM: in the first chunk only
      choice["token_ids"] = out.token_ids;
    }
    events += sse_event(with_transfer(chunk(std::move(choice)), out.finished));
  }
  first_ = false;
  if (out.finished) {
    finished_ = true;
    if (include_usage_) {
      json c = {
          {"id", meta_.id},
          {"object", meta_.kind == ApiKind::Chat ? "chat.completion.chunk" : "text_completion"},
          {"created", meta_.created},
          {"model", meta_.model},
          {"choices", json::array()},
          {"usage", usage_json(out.prompt_tokens, out.completion_tokens, out.cached_tokens)}};
      events += sse_event(c);
    }
    events += kSseDone;
  }
  return events;
}

}  // namespace dspark

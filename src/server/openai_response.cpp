#include "server/openai_response.h"

#include <chrono>

namespace dspark {

// ordered_json: objects keep the field order OpenAI writes (id, object, created, model, ...).
using json = nlohmann::ordered_json;

ResponseMeta make_response_meta(const OpenAiRequest& r, const std::string& request_id,
                                const std::string& model, const Tokenizer& tok) {
  ResponseMeta m;
  m.kind = r.kind;
  m.id = (r.kind == ApiKind::Chat ? "chatcmpl-" : "cmpl-") + request_id;  // as vLLM names them
  m.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  m.model = model;
  m.return_token_ids = r.return_token_ids;
  m.n = r.n;
  for (const PromptInput& p : r.prompts) {
    ResponsePrompt rp;
    rp.ids = p.ids;
    if (r.echo) rp.echo_text = p.text ? *p.text : tok.decode(p.ids);
    m.prompts.push_back(std::move(rp));
  }
  m.logprobs = r.logprobs;
  m.prompt_logprobs = r.prompt_logprobs;
  m.echo = r.echo;
  m.tok = &tok;
  return m;
}

namespace {

json finish_value(const std::string& reason) {
  return reason.empty() ? json() : json(reason);
}

const char* object_name(ApiKind kind, bool chunk) {
  if (kind == ApiKind::Completion) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

}  // namespace

json stop_reason_value(const RequestOutput& out) {
  if (out.stop_token >= 0) return out.stop_token;
  if (!out.stop_string.empty()) return out.stop_string;
  return nullptr;
}

bool ChoiceOutput::add(const RequestOutput& o, bool keep) {
  if (keep) {
    text += o.text;
    ids.insert(ids.end(), o.token_ids.begin(), o.token_ids.end());
    logprobs.add(o);
  }
  prompt_tokens = o.prompt_tokens;
  cached_tokens = o.cached_tokens;
  completion_tokens = o.completion_tokens;
  if (!o.finished) return false;
  finished = true;
  finish_reason = o.finish_reason;
  stop_reason = stop_reason_value(o);
  error = o.error;
  return true;
}

json usage_json(const std::vector<ChoiceOutput>& choices, int n) {
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i % size_t(n) == 0) {
      prompt_tokens += choices[i].prompt_tokens;
      cached_tokens += choices[i].cached_tokens;
    }
    completion_tokens += choices[i].completion_tokens;
  }
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json completion_response(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices) {
  json out = {{"id", meta.id},
              {"object", object_name(meta.kind, false)},
              {"created", meta.created},
              {"model", meta.model}};
  json list = json::array();
  for (int i = 0; i < int(choices.size()); ++i) {
    const ChoiceOutput& c = choices[size_t(i)];
    const ResponsePrompt& prompt = meta.prompt_of(i);
    json choice = {{"index", i}};
    json logprobs;
    if (meta.kind == ApiKind::Chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (meta.logprobs >= 0) logprobs = chat_logprobs(c.logprobs.tokens, meta.logprobs, *meta.tok);
    } else {
      choice["text"] = meta.echo ? prompt.echo_text + c.text : c.text;
      if (meta.logprobs >= 0) {
        CompletionLogprobs lp(*meta.tok, meta.logprobs);
        if (meta.echo) lp.add_prompt(prompt.ids, c.logprobs.prompt);
        lp.add(c.logprobs.tokens);
        logprobs = lp.take();
      }
    }
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] = finish_value(c.finish_reason);
    choice["stop_reason"] = c.stop_reason;
    if (meta.prompt_logprobs >= 0) {
      // vLLM: in the choice for completions, at the top level for chat (the one prompt's).
      json plp = prompt_logprobs_json(prompt.ids, c.logprobs.prompt, meta.prompt_logprobs, *meta.tok);
      if (meta.kind == ApiKind::Completion)
        choice["prompt_logprobs"] = std::move(plp);
      else if (i == 0)
        out["prompt_logprobs"] = std::move(plp);
    }
    if (meta.return_token_ids) {
      // vLLM: the prompt's ids at the top level for chat, in the choice for completions.
      if (meta.kind == ApiKind::Chat) {
        if (i == 0) out["prompt_token_ids"] = prompt.ids;
      } else {
        choice["prompt_token_ids"] = prompt.ids;
      }
      choice["token_ids"] = c.ids;
    }
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(choices, meta.n);
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
    : meta_(std::move(meta)),
      choices_(size_t(meta_.num_choices())),
      totals_(size_t(meta_.num_choices())),
      include_usage_(include_usage),
      left_(meta_.num_choices()) {
  if (meta_.kind == ApiKind::Completion && meta_.logprobs >= 0)
    for (Choice& c : choices_) c.legacy = std::make_unique<CompletionLogprobs>(*meta_.tok, meta_.logprobs);
}

// Choice `index`'s held entries in the endpoint's shape (null without logprobs), then forgotten.
json StreamFormatter::logprobs_value(int index) {
  Choice& ch = choices_[size_t(index)];
  json v;
  if (meta_.logprobs < 0) return v;
  if (meta_.kind == ApiKind::Chat) {
    v = chat_logprobs(ch.held.tokens, meta_.logprobs, *meta_.tok);
  } else {
    if (ch.first && meta_.echo) ch.legacy->add_prompt(meta_.prompt_of(index).ids, ch.held.prompt);
    ch.legacy->add(ch.held.tokens);
    v = ch.legacy->take();
  }
  ch.held.clear();
  return v;
}

json StreamFormatter::chunk(json choice) const {
  json c = {{"id", meta_.id},
            {"object", object_name(meta_.kind, true)},
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

std::string StreamFormatter::on_output(int index, const RequestOutput& out) {
  Choice& ch = choices_[size_t(index)];
  ChoiceOutput& total = totals_[size_t(index)];
  if (total.finished) return "";
  ch.held.add(out);
  total.add(out, false);
  const bool last = out.finished && left_ == 1;
  const bool has_ids = meta_.return_token_ids && !out.token_ids.empty();
  const bool echo_now = ch.first && meta_.echo;
  // A step whose text is held back (a partial character, a possible stop string) sends nothing.
  if (out.text.empty() && !has_ids && !out.finished && !echo_now) return "";
  const ResponsePrompt& prompt = meta_.prompt_of(index);
  std::string events;
  const json finish = out.finished ? finish_value(out.finish_reason) : json();
  if (meta_.kind == ApiKind::Chat) {
    if (ch.first) {
      // The role chunk goes out with the first output, so a client's TTFT is the first token's.
      json delta = {{"role", "assistant"}, {"content", ""}};
      json choice = {
          {"index", index}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
      json c = chunk(std::move(choice));
      if (meta_.return_token_ids) c["prompt_token_ids"] = prompt.ids;
      events += sse_event(c);
    }
    json delta = json::object();
    if (!out.text.empty() || !out.finished) delta["content"] = out.text;
    json choice = {{"index", index},
                   {"delta", std::move(delta)},
                   {"logprobs", logprobs_value(index)},
                   {"finish_reason", finish}};
    if (out.finished) choice["stop_reason"] = stop_reason_value(out);
    if (meta_.return_token_ids) choice["token_ids"] = out.token_ids;
    events += sse_event(with_transfer(chunk(std::move(choice)), last));
  } else {
    json choice = {{"index", index},
                   {"text", echo_now ? prompt.echo_text + out.text : out.text},
                   {"logprobs", logprobs_value(index)},
                   {"finish_reason", finish}};
    if (out.finished) choice["stop_reason"] = stop_reason_value(out);
    if (meta_.return_token_ids) {
      if (ch.first) choice["prompt_token_ids"] = prompt.ids;  // vLLM: in the first chunk only
      choice["token_ids"] = out.token_ids;
    }
    events += sse_event(with_transfer(chunk(std::move(choice)), last));
  }
  ch.first = false;
  if (out.finished && --left_ == 0) {
    if (include_usage_) {
      json c = {{"id", meta_.id},
                {"object", object_name(meta_.kind, true)},
                {"created", meta_.created},
                {"model", meta_.model},
                {"choices", json::array()},
                {"usage", usage_json(totals_, meta_.n)}};
      events += sse_event(c);
    }
    events += kSseDone;
  }
  return events;
}

}  // namespace dspark

#include "client/stream_request.h"

#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "client/http_error.h"
#include "client/sse.h"

namespace dspark {

namespace {

std::string error_message(const nlohmann::json& j) {
  const auto& e = j["error"];
  if (e.is_object() && e.contains("message") && e["message"].is_string())
    return e["message"].get<std::string>();
  return e.dump();
}

}  // namespace

bool consume_sse_data(const std::string& data, bool chat, double now_s, double& last_text_s,
                      StreamOutcome& out, bool& done) {
  if (data == "[DONE]") {
    done = true;
    return false;
  }
  if (!out.error.empty()) return true;  // already failed: read on, record nothing
  // Logprobs are not read here: the parser skips their values rather than building them (a
  // response with top_logprobs 5 is mostly logprobs, and this client shares the server's cores).
  static const nlohmann::json::parser_callback_t skip_logprobs =
      [](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        return !(event == nlohmann::json::parse_event_t::key && parsed.is_string() &&
                 parsed.get_ref<const std::string&>() == "logprobs");
      };
  auto j = nlohmann::json::parse(data, skip_logprobs, false);
  if (j.is_discarded() || !j.is_object()) {
    out.error = "malformed SSE data: " + data.substr(0, 200);
    return true;
  }
  if (j.contains("error")) {
    out.error = "error event: " + error_message(j);
    return true;
  }
  out.e2el = now_s;
  if (j.contains("usage") && j["usage"].is_object()) {
    const auto& u = j["usage"];
    if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
      out.output_tokens = u["completion_tokens"].get<int64_t>();
      out.usage_reported = true;
    }
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
      out.prompt_tokens = u["prompt_tokens"].get<int64_t>();
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return true;
  const auto& c = j["choices"][0];
  if (!c.is_object()) return true;
  std::string text;
  if (chat) {
    if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
        c["delta"]["content"].is_string())
      text = c["delta"]["content"].get<std::string>();
  } else if (c.contains("text") && c["text"].is_string()) {
    text = c["text"].get<std::string>();
  }
  if (c.contains("finish_reason") && c["finish_reason"].is_string())
    out.finish_reason = c["finish_reason"].get<std::string>();
  if (out.first_choices_s < 0) out.first_choices_s = now_s;
  if (!text.empty()) {
    if (out.text_chunks == 0)
      out.ttft = now_s;
    else
      out.itl.push_back(now_s - last_text_s);
    last_text_s = now_s;
    out.text_chunks++;
    out.text += text;
  }
  return true;
}

StreamOutcome send_stream_request(const ServerUrl& url, const StreamRequest& sr) {
  StreamOutcome out;
  httplib::Client cli(url.host, url.port);
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(sr.timeout_s));
  cli.set_connection_timeout(timeout);
  cli.set_read_timeout(timeout);
  cli.set_write_timeout(timeout);

  httplib::Request req;
  req.method = "POST";
  req.path = url.prefix + sr.path;
  req.body = sr.body;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  if (!sr.request_id.empty()) req.set_header("x-request-id", sr.request_id);
  if (!sr.api_key.empty()) req.set_header("Authorization", "Bearer " + sr.api_key);

  using clock = std::chrono::steady_clock;
  clock::time_point start;
  auto since = [&] { return std::chrono::duration<double>(clock::now() - start).count(); };
  int status = -1;
  std::string error_body;
  double last_text_s = 0;
  bool done = false;
  SseParser parser([&](const std::string& data) {
    if (!done) consume_sse_data(data, sr.chat, since(), last_text_s, out, done);
  });
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* p, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      if (error_body.size() < 4096) error_body.append(p, std::min<size_t>(n, 4096));
      return true;
    }
    parser.feed(std::string_view(p, n));
    return true;
  };

  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  start = clock::now();
  const bool ok = cli.send(req, res, err);
  if (status == 200) parser.finish();
  if (!ok) {
    out.error = transport_error(err);
    if (status > 0) out.error += " (after status " + std::to_string(status) + ")";
    return out;
  }
  if (status != 200) {
    out.error = "HTTP " + std::to_string(status);
    auto j = nlohmann::json::parse(error_body, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("error"))
      out.error += ": " + error_message(j);
    else if (!error_body.empty())
      out.error += ": " + error_body.substr(0, 200);
    return out;
  }
  if (!out.error.empty()) return out;
  if (!done) {
    out.error = "the stream ended without data: [DONE]";
    return out;
  }
  if (out.text_chunks == 0) {  // no chunk carried text: TTFT ends at the first one with choices
    if (out.first_choices_s < 0) {
      out.error = "the stream carried no choices";
      return out;
    }
    out.ttft = out.first_choices_s;
  }
  if (!out.usage_reported) out.output_tokens = out.text_chunks;
  out.success = true;
  return out;
}

}  // namespace dspark

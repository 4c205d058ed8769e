#include "train/server_client.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "client/http_error.h"
#include "core/error.h"
#include "core/timer.h"

namespace dspark::train {

using json = nlohmann::json;

json chat_request_body(const std::string& model, const std::vector<ChatMessage>& messages,
                       int max_tokens) {
  json msgs = json::array();
  for (const ChatMessage& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  return {{"model", model},           {"messages", msgs},
          {"max_tokens", max_tokens}, {"temperature", 0},
          {"return_token_ids", true}, {"kv_transfer_params", {{"include_output_tokens", true}}}};
}

namespace {

std::vector<int32_t> id_list(const json& j, const std::string& where, const char* field) {
  if (!j.is_array())
    fail(where, ": field ", field, " must be a list of token ids, got ", j.dump().substr(0, 80));
  std::vector<int32_t> out;
  out.reserve(j.size());
  for (const auto& x : j) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
      fail(where, ": field ", field, " holds ", x.dump().substr(0, 40), ", not a token id");
    out.push_back(int32_t(x.get<int64_t>()));
  }
  return out;
}

}  // namespace

ChatReply parse_chat_reply(const std::string& body, const std::string& where) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    fail(where, ": the response is not a JSON object: ", body.substr(0, 200));
  ChatReply r;
  if (!j.contains("prompt_token_ids"))
    fail(where, ": the response has no prompt_token_ids (return_token_ids unsupported?)");
  r.prompt_ids = id_list(j["prompt_token_ids"], where, "prompt_token_ids");
  if (!j.contains("kv_transfer_params") || !j["kv_transfer_params"].is_object() ||
      !j["kv_transfer_params"].contains("handle") ||
      !j["kv_transfer_params"]["handle"].is_string() ||
      j["kv_transfer_params"]["handle"].get<std::string>().empty())
    fail(where,
         ": the response has no kv_transfer_params.handle: does the server export hidden states "
         "to a store?");
  r.handle = j["kv_transfer_params"]["handle"].get<std::string>();
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty() ||
      !j["choices"][0].is_object() || !j["choices"][0].contains("token_ids"))
    fail(where, ": the response has no choices[0].token_ids");
  r.token_ids = id_list(j["choices"][0]["token_ids"], where, "choices[0].token_ids");
  return r;
}

double retry_backoff_s(int k) {
  return std::min(8.0, 0.5 * double(1 << std::min(k, 5)));
}

ServerPool::ServerPool(const std::vector<std::string>& urls, const std::string& api_key,
                       double wait_s)
    : api_key_(api_key) {
  if (urls.empty()) fail("flag --servers: no server given (http://HOST:PORT,...)");
  for (const std::string& u : urls) {
    Server s;
    s.text = u;
    while (!s.text.empty() && s.text.back() == '/') s.text.pop_back();
    s.url = parse_server_url(s.text, "flag --servers");
    for (const Server& o : servers_)
      if (o.url.text() == s.url.text()) fail("flag --servers: ", u, " is listed twice");
    servers_.push_back(std::move(s));
  }
  for (Server& s : servers_) {
    const double deadline = now_seconds() + wait_s;
    std::string last;
    for (int k = 0;; ++k) {
      const HttpReply r = http_get(s.url, "/v1/models", api_key_, 30);
      if (r.status == 200) {
        const json j = json::parse(r.body, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() ||
            j["data"].empty() || !j["data"][0].is_object() || !j["data"][0].contains("id") ||
            !j["data"][0]["id"].is_string())
          fail("flag --servers: GET ", s.text,
               "/v1/models: expected {\"data\": [{\"id\": ...}]}, got ", r.body.substr(0, 200));
        s.model = j["data"][0]["id"].get<std::string>();
        break;
      }
      last = r.status < 0 ? r.body
                          : "status " + std::to_string(r.status) + ": " + r.body.substr(0, 200);
      if (is_final_status(r.status))
        fail("flag --servers: GET ", s.text, "/v1/models: ", last,
             r.status == 401 ? " (flag --api-key?)" : "");
      if (now_seconds() >= deadline)
        fail("flag --servers: GET ", s.text, "/v1/models: ", last, " (for ", wait_s, " s)");
      std::this_thread::sleep_for(std::chrono::duration<double>(
          std::min(retry_backoff_s(k), std::max(0.05, deadline - now_seconds()))));
    }
  }
}

size_t ServerPool::acquire(int avoid) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t best = servers_.size();
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (int(i) == avoid && servers_.size() > 1) continue;
    if (best == servers_.size()) {
      best = i;
      continue;
    }
    const Counts &c = servers_[i].counts, &b = servers_[best].counts;
    if (c.in_flight < b.in_flight || (c.in_flight == b.in_flight && c.requests < b.requests))
      best = i;
  }
  ++servers_[best].counts.in_flight;
  ++servers_[best].counts.requests;
  return best;
}

void ServerPool::release(size_t i, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  --servers_[i].counts.in_flight;
  ++(ok ? servers_[i].counts.ok : servers_[i].counts.failed);
}

ServerPool::Counts ServerPool::counts(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  return servers_[i].counts;
}

HttpReply ServerPool::post(size_t i, const std::string& path, const std::string& body,
                           const std::string& request_id, double timeout_s) {
  const ServerUrl& url = servers_[i].url;
  httplib::Client cli(url.host, url.port);
  const auto secs = std::chrono::duration<double>(timeout_s);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(secs);
  cli.set_connection_timeout(std::min(us, std::chrono::microseconds(30'000'000)));
  cli.set_read_timeout(us);
  cli.set_write_timeout(us);
  httplib::Headers h;
  if (!api_key_.empty()) h.emplace("Authorization", "Bearer " + api_key_);
  if (!request_id.empty()) h.emplace("x-request-id", request_id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return {-1, "the trainer is stopping"};
    active_.insert(&cli);
  }
  auto res = cli.Post(url.prefix + path, h, body, "application/json");
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_.erase(&cli);
  }
  if (!res) return {-1, transport_error(res.error())};
  return {res->status, res->body};
}

void ServerPool::stop_all() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  for (httplib::Client* c : active_) c->stop();
}

}  // namespace dspark::train

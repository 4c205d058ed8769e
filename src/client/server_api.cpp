#include "client/server_api.h"

#include <httplib.h>

#include <cctype>
#include <map>

#include "client/http_error.h"
#include "core/error.h"

namespace dspark {

std::string transport_error(httplib::Error e) {
  using E = httplib::Error;
  static const std::map<E, const char*> kPlain = {
      {E::Connection, "cannot connect (is the server running?)"},
      {E::Read, "read failed or timed out (connection closed?)"},
      {E::Write, "write failed (connection closed?)"},
      {E::ConnectionTimeout, "connection timed out"}};
  auto it = kPlain.find(e);
  return it == kPlain.end() ? httplib::to_string(e) : it->second;
}

std::string ServerUrl::text() const {
  return "http://" + host + ":" + std::to_string(port) + prefix;
}

ServerUrl parse_server_url(const std::string& url, const std::string& what) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0)
    fail(what, ": '", url, "' is not an http:// URL (https is not supported)");
  ServerUrl u;
  std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    u.prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
  }
  // HOST, HOST:PORT, [V6ADDR] or [V6ADDR]:PORT.
  size_t host_end = rest.size();
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) fail(what, ": unterminated '[' in '", url, "'");
    host_end = close + 1;
    if (host_end < rest.size() && rest[host_end] != ':')
      fail(what, ": malformed host in '", url, "'");
  } else if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    host_end = colon;
  }
  if (host_end < rest.size()) {
    const std::string port = rest.substr(host_end + 1);
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
        std::stoi(port) > 65535)
      fail(what, ": bad port '", port, "' in '", url, "'");
    u.port = std::stoi(port);
    rest = rest.substr(0, host_end);
  }
  if (rest.size() > 2 && rest.front() == '[' && rest.back() == ']')
    rest = rest.substr(1, rest.size() - 2);
  if (rest.empty()) fail(what, ": no host in '", url, "'");
  u.host = rest;
  return u;
}

namespace {

HttpReply http_call(const ServerUrl& url, const std::string& path, const std::string* body,
                    const std::string& api_key, double timeout_s) {
  httplib::Client cli(url.host, url.port);
  const auto secs = std::chrono::duration<double>(timeout_s);
  cli.set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(secs));
  cli.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(secs));
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  auto res = body ? cli.Post(url.prefix + path, h, *body, "application/json")
                  : cli.Get(url.prefix + path, h);
  if (!res) return {-1, transport_error(res.error())};
  return {res->status, res->body};
}

}  // namespace

HttpReply http_get(const ServerUrl& url, const std::string& path, const std::string& api_key,
                   double timeout_s) {
  return http_call(url, path, nullptr, api_key, timeout_s);
}

HttpReply http_post(const ServerUrl& url, const std::string& path, const std::string& body,
                    const std::string& api_key, double timeout_s) {
  return http_call(url, path, &body, api_key, timeout_s);
}

std::string first_served_model(const ServerUrl& url, const std::string& api_key) {
  const HttpReply r = http_get(url, "/v1/models", api_key, 30);
  if (r.status != 200)
    fail("GET ", url.text(), "/v1/models: ",
         r.status < 0 ? r.body : "status " + std::to_string(r.status) + ": " + r.body);
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() ||
      j["data"].empty() || !j["data"][0].is_object() || !j["data"][0].contains("id") ||
      !j["data"][0]["id"].is_string())
    fail("GET ", url.text(), "/v1/models: expected {\"data\": [{\"id\": ...}]}, got ",
         r.body.substr(0, 200));
  return j["data"][0]["id"].get<std::string>();
}

SpecCounters scrape_spec_counters(const ServerUrl& url, const std::string& model_name,
                                  const std::string& api_key) {
  const HttpReply r = http_get(url, "/metrics", api_key, 30);
  if (r.status != 200)
    fail("GET ", url.text(),
         "/metrics: ", r.status < 0 ? r.body : "status " + std::to_string(r.status));
  std::vector<PromSample> s;
  try {
    s = parse_prom_text(r.body);
  } catch (const Error& e) {
    fail("GET ", url.text(), "/metrics: ", e.what());
  }
  // Samples without a model_name label count too (a server that does not label them).
  auto sum = [&](const std::string& name) {
    double v = 0;
    for (const auto& p : s)
      if (p.name == name &&
          (!p.labels.count("model_name") || p.labels.at("model_name") == model_name))
        v += p.value;
    return v;
  };
  SpecCounters c;
  c.present = prom_has(s, "vllm:spec_decode_num_drafts_total");
  c.drafts = sum("vllm:spec_decode_num_drafts_total");
  c.draft_tokens = sum("vllm:spec_decode_num_draft_tokens_total");
  c.accepted_tokens = sum("vllm:spec_decode_num_accepted_tokens_total");
  c.preemptions = sum("vllm:num_preemptions_total");
  for (const auto& p : s) {
    if (p.name != "vllm:spec_decode_num_accepted_tokens_per_pos_total") continue;
    if (p.labels.count("model_name") && p.labels.at("model_name") != model_name) continue;
    auto it = p.labels.find("position");
    if (it == p.labels.end() || it->second.empty() ||
        it->second.find_first_not_of("0123456789") != std::string::npos || it->second.size() > 6)
      continue;
    c.accepted_per_pos[std::stoi(it->second)] += p.value;
  }
  return c;
}

nlohmann::json spec_delta_json(const SpecCounters& before, const SpecCounters& after) {
  nlohmann::json j;
  const double drafts = after.drafts - before.drafts;
  const double draft_tokens = after.draft_tokens - before.draft_tokens;
  const double accepted = after.accepted_tokens - before.accepted_tokens;
  j["metrics_present"] = after.present;
  j["drafts"] = drafts;
  j["draft_tokens"] = draft_tokens;
  j["accepted_tokens"] = accepted;
  j["acceptance_length"] = drafts > 0 ? nlohmann::json(1.0 + accepted / drafts) : nlohmann::json();
  j["acceptance_rate"] =
      draft_tokens > 0 ? nlohmann::json(accepted / draft_tokens) : nlohmann::json();
  j["preemptions"] = after.preemptions - before.preemptions;
  nlohmann::json pos = nlohmann::json::array();
  for (const auto& [p, v] : after.accepted_per_pos) {
    auto it = before.accepted_per_pos.find(p);
    const double d = v - (it == before.accepted_per_pos.end() ? 0.0 : it->second);
    pos.push_back(drafts > 0 ? nlohmann::json(d / drafts) : nlohmann::json());
  }
  j["acceptance_rate_per_pos"] = pos;
  return j;
}

}  // namespace dspark

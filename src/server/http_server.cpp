#include "server/http_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "server/errors.h"
#include "server/hidden_export.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/output_channel.h"
#include "server/peer_socket.h"
#include "server/prometheus.h"

#ifndef DSPARK_VERSION
#define DSPARK_VERSION "0.0.0"
#endif

namespace dspark {

using nlohmann::json;
using ojson = nlohmann::ordered_json;  // responses: fields in the order OpenAI writes them
using Clock = std::chrono::steady_clock;

namespace {

// How long a waiting handler sleeps before it looks again for a stopping server.
constexpr std::chrono::milliseconds kPollInterval{100};
constexpr size_t kMaxRequestIdBytes = 256;
// The listen backlog: httplib's is 5, and 64 clients connecting at once would then wait
// a second each for a SYN retransmission.
constexpr int kListenBacklog = 1024;

// httplib::Server with access to its listening socket (to raise the backlog after binding).
class Listener : public httplib::Server {
 public:
  int socket_fd() const { return int(svr_sock_.load()); }
};

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned diff = unsigned(a.size() != b.size());
  for (size_t i = 0; i < a.size(); ++i)
    diff |= unsigned(uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0));
  return diff == 0;
}

std::string random_hex_id() {
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)gen(),
                (unsigned long long)gen());
  return buf;
}

void send_json(httplib::Response& res, const ojson& j, int status = 200) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

// The methods each route answers; another method gets 405.
const std::map<std::string, std::set<std::string>>& known_routes() {
  static const std::map<std::string, std::set<std::string>> r = {
      {"/health", {"GET", "HEAD"}},       {"/ping", {"GET", "HEAD", "POST"}},
      {"/version", {"GET", "HEAD"}},      {"/metrics", {"GET", "HEAD"}},
      {"/v1/models", {"GET", "HEAD"}},    {"/v1/completions", {"POST"}},
      {"/v1/chat/completions", {"POST"}}, {"/tokenize", {"POST"}},
      {"/detokenize", {"POST"}},          {"/v1/load_drafter", {"POST"}},
  };
  return r;
}

// vLLM's rule: the API key guards /v1 and the tokenizer routes, not health or metrics.
bool needs_auth(const std::string& path) {
  return path == "/v1" || path.rfind("/v1/", 0) == 0 || path == "/tokenize" ||
         path == "/detokenize";
}

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  ServerOptions opt;
  ServedModel model;
  int64_t started_at = 0;
  Listener svr;
  int port = -1;

  std::atomic<bool> draining{false};  // shutdown() began: no new generation requests
  std::atomic<bool> stopping{false};  // the listener is stopping: waits end now
  std::atomic<bool> shutdown_started{false};
  std::atomic<bool> serving{false};
  std::mutex inflight_mu;
  std::condition_variable inflight_cv;
  int inflight = 0;  // generation requests from submit until their response is written

  Impl(Engine& e, ServerOptions o) : engine(e), opt(std::move(o)) {
    const ModelConfig& cfg = engine.model().config();
    model.name = opt.served_model_name;
    model.tok = &engine.tokenizer();
    model.vocab_size = cfg.vocab_size;
    model.max_model_len = engine.max_model_len();
    model.eos_token_ids.assign(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end());
    try {
      model.chat_format = detect_chat_format(engine.tokenizer());
    } catch (const Error&) {
      // No chat template: /v1/chat/completions answers 400, completions still work.
    }
    started_at = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
    setup();
  }

  // Counts a generation request while it holds engine work or an unfinished response.
  struct InflightToken {
    Impl& s;
    explicit InflightToken(Impl& s) : s(s) {
      std::lock_guard<std::mutex> lock(s.inflight_mu);
      ++s.inflight;
    }
    ~InflightToken() {
      {
        std::lock_guard<std::mutex> lock(s.inflight_mu);
        --s.inflight;
      }
      s.inflight_cv.notify_all();
    }
    InflightToken(const InflightToken&) = delete;
    InflightToken& operator=(const InflightToken&) = delete;
  };

  // Notices a client that closed its connection while its request waits or runs: a stream
  // learns it from a failed write, but a queued request or a non-streaming one writes nothing
  // until it ends. Looks at most every kPollInterval.
  struct PeerWatch {
    int fd = -1;
    Clock::time_point next{};
    bool gone() {
      const auto now = Clock::now();
      if (fd < 0 || now < next) return false;
      next = now + kPollInterval;
      return peer_closed(fd);
    }
  };

  // The streaming state lives in the response's content provider; when httplib drops it (the
  // stream ended, the client left, the server stopped) an unfinished request is aborted, which
  // frees its KV blocks in the engine's next step.
  struct StreamState {
    Impl& s;
    std::shared_ptr<OutputChannel> chan;
    uint64_t handle = 0;
    StreamFormatter fmt;
    PeerWatch peer;
    InflightToken token;
    StreamState(Impl& s, std::shared_ptr<OutputChannel> c, uint64_t h, StreamFormatter f,
                PeerWatch p)
        : s(s), chan(std::move(c)), handle(h), fmt(std::move(f)), peer(p), token(s) {}
    ~StreamState() {
      if (!fmt.finished()) s.engine.abort(handle);
    }
  };

  bool authorized(const httplib::Request& req) const {
    if (opt.api_key.empty()) return true;
    return constant_time_equal(req.get_header_value("Authorization"), "Bearer " + opt.api_key);
  }

  void check_auth(const httplib::Request& req) const {
    if (!authorized(req))
      throw ApiError(401, "authentication_error",
                     "Incorrect or missing API key: send 'Authorization: Bearer <key>'", "",
                     "invalid_api_key");
  }

  // Runs a handler: an ApiError becomes its JSON error, anything else a 500; never a crash.
  template <class F>
  void guarded(httplib::Response& res, F&& f) {
    try {
      f();
    } catch (const ApiError& e) {
      if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, e);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dspark serve: internal error: %s\n", e.what());
      send_error(res, ApiError(500, "server_error", std::string("internal error: ") + e.what(), "",
                               "internal_error"));
    }
  }

  // Reads a POST body itself (httplib's own cap misses chunked and compressed bodies).
  std::string read_body(const httplib::Request& req, httplib::Response& res,
                        const httplib::ContentReader& reader) {
    // HTTP/1.1: without Content-Length or Transfer-Encoding a request has no body (httplib
    // would read until the client closes).
    if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) return "";
    if (req.is_multipart_form_data())
      throw ApiError(415, "invalid_request_error",
                     "multipart bodies are not accepted: send application/json", "",
                     "unsupported_media_type");
    std::string body;
    bool too_large = false;
    const bool ok = reader([&](const char* data, size_t n) {
      if (body.size() + n > opt.max_body_bytes) {
        too_large = true;
        return false;
      }
      body.append(data, n);
      return true;
    });
    // The rest of an unread body would be parsed as the next request on this connection: close it.
    if (too_large || res.status == 413 || !ok) res.set_header("Connection", "close");
    if (too_large || res.status == 413)
      throw ApiError(413, "invalid_request_error",
                     "request body over the server's limit of " +
                         std::to_string(opt.max_body_bytes) + " bytes",
                     "", "request_too_large");
    if (!ok) throw bad_request("the request body could not be read");
    res.status = -1;  // the reader may have set one; the handler decides
    return body;
  }

  using BodyHandler = void (Impl::*)(const httplib::Request&, httplib::Response&,
                                     const std::string& body);

  void post(const char* path, BodyHandler h) {
    svr.Post(path, [this, h](const httplib::Request& req, httplib::Response& res,
                             const httplib::ContentReader& reader) {
      guarded(res, [&] {
        std::string body = read_body(req, res, reader);
        if (needs_auth(req.path)) check_auth(req);
        (this->*h)(req, res, body);
      });
    });
  }

  // The request id: x-request-id, else the body's request_id, else a random one.
  std::string request_id(const httplib::Request& req, const std::string& from_body) {
    std::string id = req.get_header_value("x-request-id");
    if (id.empty()) id = from_body;
    if (id.empty()) id = random_hex_id();
    if (id.size() > kMaxRequestIdBytes)
      throw bad_request(
          "x-request-id is longer than " + std::to_string(kMaxRequestIdBytes) + " bytes",
          "x-request-id");
    for (unsigned char c : id)
      if (c < 0x20 || c > 0x7e)
        throw bad_request("x-request-id must be printable ASCII", "x-request-id");
    return id;
  }

  void setup() {
    svr.new_task_queue = [n = std::max(4, opt.http_threads)] {
      return new httplib::ThreadPool(size_t(n));
    };
    svr.set_keep_alive_timeout(opt.keep_alive_timeout_s);
    svr.set_keep_alive_max_count(1000);
    svr.set_read_timeout(opt.read_timeout_s, 0);
    svr.set_write_timeout(opt.write_timeout_s, 0);
    svr.set_payload_max_length(opt.max_body_bytes);
    svr.set_tcp_nodelay(true);  // one small SSE chunk per step: never wait for Nagle
    // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second server share the port.
    svr.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    });
    // A body over the cap is refused before the client sends it.
    svr.set_expect_100_continue_handler(
        [this](const httplib::Request& req, httplib::Response& res) {
          if (req.has_header("Content-Length") &&
              req.get_header_value<uint64_t>("Content-Length") > uint64_t(opt.max_body_bytes)) {
            res.status = 413;  // the error handler writes the JSON
            res.set_header("Connection", "close");
            return 413;
          }
          return 100;
        });
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.has_header("x-request-id"))
        res.set_header("x-request-id", req.get_header_value("x-request-id"));
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // While draining, every response closes its connection, so clients do not hold idle
    // keep-alive connections that the stopping listener would wait out.
    svr.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
      if (!draining) return;
      res.headers.erase("Keep-Alive");
      if (!res.has_header("Connection")) res.set_header("Connection", "close");
    });
    // Statuses that no handler described (unknown route, wrong method, oversized body, a
    // malformed request line) get a JSON error too.
    svr.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty())
            return httplib::Server::HandlerResponse::Unhandled;  // a handler's own error
          ApiError e = error_for_status(res.status, req.path);
          if (res.status == 404) {
            auto it = known_routes().find(req.path);
            if (needs_auth(req.path) && !authorized(req)) {
              e = ApiError(401, "authentication_error",
                           "Incorrect or missing API key: send 'Authorization: Bearer <key>'", "",
                           "invalid_api_key");
              res.set_header("WWW-Authenticate", "Bearer");
            } else if (it != known_routes().end() && !it->second.count(req.method)) {
              e = error_for_status(405, req.path);
              std::string allow;
              for (const std::string& m : it->second) allow += (allow.empty() ? "" : ", ") + m;
              res.set_header("Allow", allow);
            }
          }
          send_error(res, e);
          return httplib::Server::HandlerResponse::Handled;
        }));
    svr.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown exception";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          send_error(
              res, ApiError(500, "server_error", "internal error: " + what, "", "internal_error"));
        });

    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) { health(res); });
    svr.Get("/ping", [this](const httplib::Request&, httplib::Response& res) { health(res); });
    svr.Get("/version", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, {{"version", DSPARK_VERSION}});
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      guarded(res, [&] {
        std::string text =
            render_prometheus(engine.metrics(), model.name, engine.spec() != nullptr);
        if (opt.exports) text += opt.exports->prometheus(model.name);
        res.set_content(text, kPrometheusContentType);
      });
    });
    svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] {
        check_auth(req);
        ojson card = {{"id", model.name},
                      {"object", "model"},
                      {"created", started_at},
                      {"owned_by", "dspark"},
                      {"root", opt.model_root},
                      {"parent", nullptr},
                      {"max_model_len", model.max_model_len},
                      {"permission", ojson::array()}};
        send_json(res, {{"object", "list"}, {"data", ojson::array({card})}});
      });
    });
    post("/ping", &Impl::ping);
    post("/v1/completions", &Impl::completions);
    post("/v1/chat/completions", &Impl::chat_completions);
    post("/tokenize", &Impl::tokenize);
    post("/detokenize", &Impl::detokenize);
    post("/v1/load_drafter", &Impl::load_drafter);
    // Catch-alls for other bodies: read (and cap) the body, then 401 / 404 / 405, so a
    // keep-alive connection never reads a refused request's body as the next request.
    auto refuse = [this](const httplib::Request& req, httplib::Response& res,
                         const httplib::ContentReader& reader) {
      guarded(res, [&] {
        read_body(req, res, reader);
        if (needs_auth(req.path)) check_auth(req);
        auto it = known_routes().find(req.path);
        if (it == known_routes().end()) throw error_for_status(404, req.path);
        std::string allow;
        for (const std::string& m : it->second) allow += (allow.empty() ? "" : ", ") + m;
        res.set_header("Allow", allow);
        throw error_for_status(405, req.path);
      });
    };
    svr.Post(".*", refuse);
    svr.Put(".*", refuse);
    svr.Patch(".*", refuse);
    svr.Delete(".*", refuse);
  }

  void health(httplib::Response& res) {
    if (draining || !engine.accepting()) {
      send_error(res, error_for_status(503, "/health"));
      return;
    }
    res.status = 200;  // vLLM: an empty 200
  }

  void ping(const httplib::Request&, httplib::Response& res, const std::string&) { health(res); }

  // Hot drafter reload (behind the API key, as every /v1 route): {"path": DIR}.
  void load_drafter(const httplib::Request&, httplib::Response& res, const std::string& body) {
    const nlohmann::json j = parse_json_body(body);
    if (!j.contains("path") || !j["path"].is_string() || j["path"].get<std::string>().empty())
      throw bad_request("'path' must name a drafter directory", "path");
    if (!opt.load_drafter)
      throw bad_request("this server decodes without a drafter; nothing to reload", "path");
    const std::string path = j["path"].get<std::string>();
    int version = 0;
    try {
      version = opt.load_drafter(path);
    } catch (const Error& e) {
      throw bad_request(e.what(), "path");
    }
    std::fprintf(stderr, "dspark serve: drafter version %d loaded from %s\n", version, path.c_str());
    send_json(res, {{"drafter_version", version}, {"path", path}});
  }
  void completions(const httplib::Request& req, httplib::Response& res, const std::string& body) {
    generate(ApiKind::Completion, req, res, body);
  }
  void chat_completions(const httplib::Request& req, httplib::Response& res,
                        const std::string& body) {
    generate(ApiKind::Chat, req, res, body);
  }

  void generate(ApiKind kind, const httplib::Request& req, httplib::Response& res,
                const std::string& body) {
    if (draining) throw error_for_status(503, req.path);
    const json j = parse_json_body(body);
    OpenAiRequest r =
        kind == ApiKind::Chat ? parse_chat_request(j, model) : parse_completion_request(j, model);
    const std::string rid = request_id(req, r.request_id);
    if (!req.has_header("x-request-id"))
      res.set_header("x-request-id", rid);  // else echoed already
    r.engine.request_id = rid;
    if (r.export_hidden && !opt.exports)
      throw bad_request(
          "kv_transfer_params: this server exports no hidden states (start it with "
          "--kv-transfer-config)",
          "kv_transfer_params");
    ResponseMeta meta =
        make_response_meta(kind, rid, model.name, r.return_token_ids,
                           r.return_token_ids ? r.engine.prompt : std::vector<int32_t>{});
    if (opt.exports && opt.exports->wants(r.export_hidden)) {
      r.engine.export_hidden = true;
      // Sampled live traffic (export_fraction) keeps the whole exchange.
      r.engine.export_output_tokens = r.export_hidden ? r.include_output_tokens : true;
      r.engine.export_handle = opt.exports->new_handle(rid);
      if (r.export_hidden) meta.kv_transfer_params = {{"handle", r.engine.export_handle}};
    }

    auto chan = std::make_shared<OutputChannel>();
    auto token = std::make_unique<InflightToken>(*this);
    uint64_t handle = 0;
    try {
      handle = engine.submit(std::move(r.engine),
                             [chan](RequestOutput&& o) { chan->push(std::move(o)); });
    } catch (const Error& e) {
      if (draining || !engine.accepting()) throw error_for_status(503, req.path);
      throw submit_error(e, r);
    }

    PeerWatch peer{find_peer_socket(req.local_port, req.remote_addr, req.remote_port)};
    if (r.stream) {
      auto st = std::make_shared<StreamState>(
          *this, chan, handle, StreamFormatter(std::move(meta), r.include_usage), peer);
      token.reset();  // the stream state holds its own
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream", [this, st](size_t, httplib::DataSink& sink) {
            std::string events;
            for (const RequestOutput& o : st->chan->take(kPollInterval))
              events += st->fmt.on_output(o);
            // A failed write means the client is gone: returning false drops the state, which
            // aborts.
            if (!events.empty() && !sink.write(events.data(), events.size())) return false;
            if (st->fmt.finished()) {
              sink.done();
              return true;
            }
            if (events.empty() && st->peer.gone()) return false;  // left while queued
            return !stopping.load();  // the server is going away: end the stream rather than hang
          });
      return;
    }

    // Non-streaming: collect the outputs, then answer once.
    std::string text;
    std::vector<int32_t> ids;
    std::string finish_reason, error;
    nlohmann::ordered_json stop_reason;
    int prompt_tokens = 0, completion_tokens = 0;
    for (bool done = false; !done;) {
      for (RequestOutput& o : chan->take(kPollInterval)) {
        text += o.text;
        ids.insert(ids.end(), o.token_ids.begin(), o.token_ids.end());
        prompt_tokens = o.prompt_tokens;
        completion_tokens = o.completion_tokens;
        if (o.finished) {
          done = true;
          finish_reason = o.finish_reason;
          stop_reason = stop_reason_value(o);
          error = o.error;
        }
      }
      if (!done && stopping) {
        engine.abort(handle);
        throw error_for_status(503, req.path);
      }
      if (!done && peer.gone()) {
        // Nobody will read the answer: free the request's KV blocks now.
        engine.abort(handle);
        throw ApiError(400, "invalid_request_error", "the client closed the connection", "",
                       "client_disconnected");
      }
    }
    if (finish_reason == "abort") {
      // Only the engine aborts a non-streaming request: it is stopping, or a step failed.
      if (error.rfind("internal error", 0) == 0)
        throw ApiError(500, "server_error", error, "", "internal_error");
      throw ApiError(503, "service_unavailable_error",
                     "the request was aborted: " +
                         (error.empty() ? std::string("the server is shutting down") : error),
                     "", "request_aborted");
    }
    send_json(
        res, completion_response(meta, text, ids, finish_reason, stop_reason, prompt_tokens,
                                  completion_tokens));
  }

  // The engine refuses what it can never run (a prompt over the context, say) with a message that
  // starts with the field's name; the status is 400 and `param` the request's name for the field.
  static ApiError submit_error(const Error& e, const OpenAiRequest& r) {
    const std::string msg = e.what();
    auto starts = [&](const char* p) { return msg.rfind(p, 0) == 0; };
    const bool context =
        msg.find("maximum") != std::string::npos || msg.find("KV cache") != std::string::npos;
    const char* prompt_param = r.kind == ApiKind::Chat ? "messages" : "prompt";
    if (starts("max_tokens"))
      return bad_request(msg, r.max_tokens_param, context ? "context_length_exceeded" : "");
    if (starts("prompt") || starts("the prompt"))
      return bad_request(msg, prompt_param, context ? "context_length_exceeded" : "");
    for (const char* f : {"temperature", "top_k", "top_p", "min_p"})
      if (starts(f)) return bad_request(msg, f);
    return bad_request(msg);
  }

  void tokenize(const httplib::Request&, httplib::Response& res, const std::string& body) {
    const TokenizeRequest r = parse_tokenize_request(parse_json_body(body), model);
    ojson out = {
        {"count", r.tokens.size()}, {"max_model_len", model.max_model_len}, {"tokens", r.tokens}};
    if (r.return_token_strs) {
      ojson strs = ojson::array();
      for (int32_t id : r.tokens) strs.push_back(model.tok->decode(std::vector<int32_t>{id}));
      out["token_strs"] = std::move(strs);
    } else {
      out["token_strs"] = nullptr;
    }
    send_json(res, out);
  }

  void detokenize(const httplib::Request&, httplib::Response& res, const std::string& body) {
    const std::vector<int32_t> ids = parse_detokenize_request(parse_json_body(body), model);
    std::string text;
    try {
      text = model.tok->decode(ids);
    } catch (const Error& e) {
      throw bad_request(std::string("'tokens' could not be decoded: ") + e.what(), "tokens");
    }
    send_json(res, {{"prompt", text}});
  }

  void shutdown() {
    if (shutdown_started.exchange(true)) return;
    draining = true;
    engine.drain();  // running and waiting requests finish; their outputs reach the handlers
    {
      // Let the handlers write what the engine produced before the listener stops (httplib
      // cuts chunked responses off once it stops).
      std::unique_lock<std::mutex> lock(inflight_mu);
      inflight_cv.wait_for(lock, std::chrono::seconds(opt.drain_timeout_s),
                           [&] { return inflight == 0; });
    }
    stopping = true;
    // serve() may not have reached listen yet; stop() only acts on a running listener.
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (serving && !svr.is_running() && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    svr.stop();
  }
};

HttpServer::HttpServer(Engine& engine, ServerOptions opt)
    : impl_(std::make_unique<Impl>(engine, std::move(opt))) {
  // A client that disconnects mid-write must not kill the process.
  ::signal(SIGPIPE, SIG_IGN);
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  Impl& s = *impl_;
  errno = 0;
  if (s.opt.port == 0) {
    s.port = s.svr.bind_to_any_port(s.opt.host);
  } else {
    s.port = s.svr.bind_to_port(s.opt.host, s.opt.port) ? s.opt.port : -1;
  }
  if (s.port < 0)
    fail("flags --host/--port: cannot listen on ", s.opt.host, ":", s.opt.port, " (",
         errno ? std::strerror(errno) : "the address does not resolve", ")");
  ::listen(s.svr.socket_fd(), kListenBacklog);  // Linux: a second listen() raises the backlog
  return s.port;
}

void HttpServer::serve() {
  Impl& s = *impl_;
  if (s.port < 0) fail("HttpServer::serve: bind() first");
  s.serving = true;
  if (!s.stopping) s.svr.listen_after_bind();
  s.serving = false;
}

void HttpServer::shutdown() {
  impl_->shutdown();
}

namespace {

int g_signal_pipe[2] = {-1, -1};
std::atomic<int> g_signals{0};

void on_signal(int) {
  const int saved = errno;
  if (g_signals.fetch_add(1) >= 1) {
    static const char msg[] = "dspark serve: second signal, exiting now\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(1);
  }
  const char c = 1;
  (void)!::write(g_signal_pipe[1], &c, 1);
  errno = saved;
}

}  // namespace

void HttpServer::serve_until_signal(const std::function<void(int)>& on_ready) {
  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) fail("serve: pipe2: ", std::strerror(errno));
  g_signals = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  struct sigaction old_term {
  }, old_int{};
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGINT, &sa, &old_int);

  // The watcher turns the handler's byte into a graceful shutdown (which may take a while).
  std::thread watcher([this] {
    char c = 0;
    ssize_t n;
    do n = ::read(g_signal_pipe[0], &c, 1);
    while (n < 0 && errno == EINTR);
    if (n == 1 && c == 1) {
      std::fprintf(stderr, "dspark serve: signal received: draining requests, then exiting\n");
      shutdown();
    }
  });
  on_ready(impl_->port);
  serve();
  const char wake = 0;  // serve() ended on its own: release the watcher
  (void)!::write(g_signal_pipe[1], &wake, 1);
  watcher.join();
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGINT, &old_int, nullptr);
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
}

}  // namespace dspark

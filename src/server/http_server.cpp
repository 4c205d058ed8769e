#include "server/http_server.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "server/errors.h"
#include "server/hidden_export.h"
#include "server/http_transport.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/prometheus.h"

#ifndef DSPARK_VERSION
#define DSPARK_VERSION "0.0.0"
#endif

namespace dspark {

using nlohmann::json;
using ojson = nlohmann::ordered_json;  // responses: fields in the order OpenAI writes them

namespace {

constexpr size_t kMaxRequestIdBytes = 256;

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

HttpResponse json_response(const ojson& j, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = dump_json(j);
  return r;
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

std::string allow_header(const std::set<std::string>& methods) {
  std::string allow;
  for (const std::string& m : methods) allow += (allow.empty() ? "" : ", ") + m;
  return allow;
}

// A non-streamed response: its choices' outputs, gathered until every choice finishes.
struct Gathered {
  std::vector<ChoiceOutput> choices;
  std::atomic<int> left;  // choices not finished
  ResponseMeta meta;
  HttpResponse head;
  Gathered(ResponseMeta m, HttpResponse h)
      : choices(size_t(m.num_choices())), left(m.num_choices()), meta(std::move(m)), head(std::move(h)) {}
};

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  ServerOptions opt;
  ServedModel model;
  int64_t started_at = 0;
  std::unique_ptr<HttpTransport> transport;
  int port = -1;

  std::atomic<bool> draining{false};  // shutdown() began: no new generation requests
  std::atomic<bool> shutdown_started{false};

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
    // A response_format text ends with an end-of-sequence id or the chat format's stop tokens.
    std::vector<int32_t> ends = model.eos_token_ids;
    if (model.chat_format)
      for (int32_t id : chat_stop_tokens(engine.tokenizer(), *model.chat_format)) ends.push_back(id);
    model.grammar_vocab = std::make_shared<GrammarVocab>(engine.tokenizer(), std::move(ends));
    started_at = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
    HttpTransportOptions to;
    to.host = opt.host;
    to.port = opt.port;
    to.max_body_bytes = opt.max_body_bytes;
    to.idle_timeout_s = opt.idle_timeout_s;
    to.head_timeout_s = opt.head_timeout_s;
    to.write_timeout_s = opt.write_timeout_s;
    to.io_threads = opt.io_threads;
    to.handler_threads = opt.handler_threads;
    transport = std::make_unique<HttpTransport>(
        to, [this](HttpRequest&& req, std::shared_ptr<HttpExchange> ex) { route(req, ex); },
        [](int status) { return error_response(error_for_status(status, "")); });
  }

  static HttpResponse error_response(const ApiError& e) {
    HttpResponse r;
    r.status = e.status;
    r.content_type = "application/json";
    r.body = error_body(e);
    if (e.status == 401) r.set_header("WWW-Authenticate", "Bearer");
    return r;
  }

  bool authorized(const HttpRequest& req) const {
    if (opt.api_key.empty()) return true;
    return constant_time_equal(req.header("Authorization"), "Bearer " + opt.api_key);
  }

  // Every request: the API key, the route and method, then the route's handler. An ApiError
  // becomes its JSON error, an Error (a refused request) the one api_error gives it, anything
  // else a 500; never a crash.
  void route(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex) {
    try {
      if (needs_auth(req.path) && !authorized(req))
        throw ApiError(401, "authentication_error",
                       "Incorrect or missing API key: send 'Authorization: Bearer <key>'", "",
                       "invalid_api_key");
      auto it = known_routes().find(req.path);
      if (it == known_routes().end()) throw error_for_status(404, req.path);
      if (!it->second.count(req.method)) {
        HttpResponse r = error_response(error_for_status(405, req.path));
        r.set_header("Allow", allow_header(it->second));
        return ex->reply(std::move(r));
      }
      if (req.method == "POST") {
        if (req.header("Content-Type").rfind("multipart/", 0) == 0)
          throw ApiError(415, "invalid_request_error",
                         "multipart bodies are not accepted: send application/json", "",
                         "unsupported_media_type");
        if (req.path == "/v1/completions") return generate(ApiKind::Completion, req, ex);
        if (req.path == "/v1/chat/completions") return generate(ApiKind::Chat, req, ex);
      }
      ex->reply(answer(req));
    } catch (const ApiError& e) {
      ex->reply(error_response(e));
    } catch (const Error& e) {  // a refused request: its kind and field give the answer
      ex->reply(error_response(api_error(e)));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dspark serve: internal error: %s\n", e.what());
      ex->reply(error_response(ApiError(500, "server_error",
                                        std::string("internal error: ") + e.what(), "",
                                        "internal_error")));
    }
  }

  // The routes that answer at once.
  HttpResponse answer(const HttpRequest& req) {
    const std::string& p = req.path;
    if (p == "/health" || p == "/ping") return health();
    if (p == "/version") return json_response({{"version", DSPARK_VERSION}});
    if (p == "/metrics") {
      HttpResponse r;
      r.content_type = kPrometheusContentType;
      r.body = render_prometheus(engine.metrics(), model.name, engine.spec() != nullptr);
      if (opt.exports) r.body += opt.exports->prometheus(model.name);
      return r;
    }
    if (p == "/v1/models") {
      ojson card = {{"id", model.name},
                    {"object", "model"},
                    {"created", started_at},
                    {"owned_by", "dspark"},
                    {"root", opt.model_root},
                    {"parent", nullptr},
                    {"max_model_len", model.max_model_len},
                    {"permission", ojson::array()}};
      return json_response({{"object", "list"}, {"data", ojson::array({card})}});
    }
    if (p == "/tokenize") return tokenize(req.body);
    if (p == "/detokenize") return detokenize(req.body);
    if (p == "/v1/load_drafter") return load_drafter(req.body);
    throw error_for_status(404, p);
  }

  HttpResponse health() {
    if (draining || !engine.accepting()) return error_response(error_for_status(503, "/health"));
    HttpResponse r;  // vLLM: an empty 200
    return r;
  }

  // `requested` resolved (symlinks followed, `..` collapsed) when it lies under the allowed
  // drafter root; else a 403 that names neither the path nor whether it exists.
  std::string resolve_drafter_path(const std::string& requested) const {
    namespace fs = std::filesystem;
    const fs::path root = opt.drafter_root;  // canonical
    const fs::path p = fs::path(requested).is_relative() ? root / requested : fs::path(requested);
    std::error_code ec;
    const fs::path resolved = fs::weakly_canonical(p, ec);
    const bool inside = !ec && !root.empty() &&
                        std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end()).first == root.end();
    if (!inside)
      throw ApiError(403, "permission_error", "'path' is not under this server's --allowed-drafter-root", "path",
                     "drafter_path_not_allowed");
    return resolved.string();
  }

  // Hot drafter reload (behind the API key, as every /v1 route; only with --enable-drafter-reload):
  // {"path": DIR} under --allowed-drafter-root.
  HttpResponse load_drafter(const std::string& body) {
    if (!opt.drafter_reload)
      throw ApiError(404, "not_found_error",
                     "runtime drafter loading is off (dspark serve --enable-drafter-reload --allowed-drafter-root DIR)",
                     "", "not_found");
    const nlohmann::json j = parse_json_body(body);
    if (!j.contains("path") || !j["path"].is_string() || j["path"].get<std::string>().empty())
      throw bad_request("'path' must name a drafter directory", "path");
    if (!opt.load_drafter)
      throw bad_request("this server decodes without a drafter; nothing to reload", "path");
    const std::string path = resolve_drafter_path(j["path"].get<std::string>());
    int version = 0;
    try {
      version = opt.load_drafter(path);
    } catch (const Error& e) {
      throw bad_request(e.what(), "path");
    }
    std::fprintf(stderr, "dspark serve: drafter version %d loaded from %s\n", version, path.c_str());
    return json_response({{"drafter_version", version}, {"path", path}});
  }

  // The request id: x-request-id, else the body's request_id, else a random one.
  std::string request_id(const HttpRequest& req, const std::string& from_body) {
    std::string id = req.header("x-request-id");
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

  // A completion: each choice submitted to the engine as its own request, answered as they
  // produce. The engine's outputs are formatted on the connection's strand, off the engine
  // thread; a client that leaves aborts every choice, which frees their KV blocks in the
  // engine's next step.
  void generate(ApiKind kind, const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex) {
    if (draining) throw error_for_status(503, req.path);
    const json j = parse_json_body(req.body);
    OpenAiRequest r =
        kind == ApiKind::Chat ? parse_chat_request(j, model) : parse_completion_request(j, model);
    const std::string rid = request_id(req, r.request_id);
    if (r.export_hidden && !opt.exports)
      throw bad_request(
          "kv_transfer_params: this server exports no hidden states (start it with "
          "--kv-transfer-config)",
          "kv_transfer_params");
    const int total = r.num_choices();
    if (opt.exports && opt.exports->exports_all() && total > 1)
      throw bad_request(
          "this server exports every request's hidden states (extract_hidden_states): one choice "
          "per request (n 1 and a single prompt)",
          r.n > 1 ? "n" : "prompt");
    encode_prompt(r, model);  // every field is valid: only now are the prompts tokenized
    ResponseMeta meta = make_response_meta(r, rid, model.name, *model.tok);
    std::vector<EngineRequest> reqs;
    for (int i = 0; i < total; ++i) {
      EngineRequest e = choice_request(r, i, rid);
      if (opt.exports && opt.exports->wants(r.export_hidden)) {
        // Asked for, or every request under extract_hidden_states (Speculators' trainer sends no
        // kv_transfer_params and needs the handle): the prompt, and the output when asked for.
        // Sampled live traffic (export_fraction, each choice drawn) keeps the whole exchange,
        // and no handle.
        const bool asked = r.export_hidden || opt.exports->exports_all();
        e.export_hidden = true;
        e.export_output_tokens = asked ? r.include_output_tokens : true;
        e.export_handle = opt.exports->new_handle(e.request_id);
        if (asked) meta.kv_transfer_params = {{"handle", e.export_handle}};
      }
      // Every choice is checked before any is submitted, so a refusal leaves nothing running.
      try {
        engine.check(e);
      } catch (const Error& err) {
        throw api_error(err, request_field(err.param(), r));
      }
      reqs.push_back(std::move(e));
    }

    HttpResponse head;
    if (!req.has_header("x-request-id")) head.set_header("x-request-id", rid);
    std::function<OutputFn(int)> on_output;
    if (r.stream) {
      auto fmt = std::make_shared<StreamFormatter>(std::move(meta), r.include_usage);
      on_output = [ex, fmt](int i) -> OutputFn {
        return [ex, fmt, i](RequestOutput&& o) {
          ex->post([ex, fmt, i, o = std::move(o)] {
            std::string events = fmt->on_output(i, o);
            if (!events.empty()) ex->write(std::move(events));
            if (fmt->finished()) ex->finish();
          });
        };
      };
    } else {
      auto g = std::make_shared<Gathered>(std::move(meta), head);
      on_output = [ex, g](int i) -> OutputFn {
        return [ex, g, i](RequestOutput&& o) {
          if (!g->choices[size_t(i)].add(o, true)) return;
          if (g->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
          // Every choice finished: the response is built on the connection's strand, off the
          // engine thread.
          ex->post([ex, g] { ex->reply(finished_response(*g)); });
        };
      };
    }
    auto handles = std::make_shared<std::vector<uint64_t>>();
    try {
      for (int i = 0; i < total; ++i)
        handles->push_back(engine.submit(std::move(reqs[size_t(i)]), on_output(i)));
    } catch (const Error& e) {
      // Only a stopping engine refuses a checked request: the choices already in it end too.
      for (uint64_t h : *handles) engine.abort(h);
      if (e.kind() == ErrorKind::Unavailable || draining || !engine.accepting())
        throw error_for_status(503, req.path);
      throw api_error(e, request_field(e.param(), r));
    }
    ex->on_gone([this, handles] {
      for (uint64_t h : *handles) engine.abort(h);
    });
    if (r.stream) {
      head.content_type = "text/event-stream";
      head.set_header("Cache-Control", "no-cache");
      ex->start_stream(std::move(head));
    }
  }

  static HttpResponse finished_response(const Gathered& g) {
    HttpResponse res;
    const auto aborted = std::find_if(g.choices.begin(), g.choices.end(),
                                      [](const ChoiceOutput& c) { return c.finish_reason == "abort"; });
    if (aborted != g.choices.end()) {
      // Only the engine aborts a request whose client is still there: it is stopping, or a
      // step failed.
      const std::string& error = aborted->error;
      if (error.rfind("internal error", 0) == 0)
        res = error_response(ApiError(500, "server_error", error, "", "internal_error"));
      else
        res = error_response(ApiError(
            503, "service_unavailable_error",
            "the request was aborted: " +
                (error.empty() ? std::string("the server is shutting down") : error),
            "", "request_aborted"));
    } else {
      res = json_response(completion_response(g.meta, g.choices));
    }
    for (const auto& [k, v] : g.head.headers) res.set_header(k, v);
    return res;
  }

  // The request's name for a field the engine refused (Error::param, in the engine's names):
  // a chat's prompt is its messages, and max_tokens is named as the request named it.
  static std::string request_field(const std::string& engine_field, const OpenAiRequest& r) {
    if (engine_field == "prompt") return r.kind == ApiKind::Chat ? "messages" : "prompt";
    if (engine_field == "max_tokens") return r.max_tokens_param;
    return engine_field;
  }

  HttpResponse tokenize(const std::string& body) {
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
    return json_response(out);
  }

  HttpResponse detokenize(const std::string& body) {
    const std::vector<int32_t> ids = parse_detokenize_request(parse_json_body(body), model);
    std::string text;
    try {
      text = model.tok->decode(ids);
    } catch (const Error& e) {
      throw bad_request(std::string("'tokens' could not be decoded: ") + e.what(), "tokens");
    }
    return json_response({{"prompt", text}});
  }

  void shutdown() {
    if (shutdown_started.exchange(true)) return;
    draining = true;
    transport->begin_drain();  // idle keep-alive connections close; responses say close
    engine.drain();  // running and waiting requests finish; their outputs reach the handlers
    // Let the responses be written before the connections close.
    transport->wait_idle(std::chrono::seconds(opt.drain_timeout_s));
    transport->stop();
  }
};

HttpServer::HttpServer(Engine& engine, ServerOptions opt)
    : impl_(std::make_unique<Impl>(engine, std::move(opt))) {
  // A client that disconnects mid-write must not kill the process.
  ::signal(SIGPIPE, SIG_IGN);
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  impl_->port = impl_->transport->bind();
  return impl_->port;
}

void HttpServer::serve() {
  if (impl_->port < 0) fail("HttpServer::serve: bind() first");
  impl_->transport->serve();
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

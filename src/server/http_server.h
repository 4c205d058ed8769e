// HttpServer: the OpenAI-compatible HTTP front end of an Engine: the routes, on the
// event-driven HttpTransport (Boost.Beast), so that idle, slow and waiting clients hold no thread.
//
// Routes: GET /health, /ping, /version, /metrics (no authentication, as vLLM); GET /v1/models,
// POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize (a Bearer key when one is
// set). Every error is an OpenAI error object; a bad request never stops the server.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "runtime/engine.h"

namespace dspark {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                   // 0: any free port (see bind())
  std::string api_key;               // empty: no authentication
  std::string served_model_name;     // the id of /v1/models and the "model" requests must name
  std::string model_root;            // the model directory, reported as /v1/models "root"
  size_t max_body_bytes = 8u << 20;  // larger request bodies get 413
  // A connection that sends nothing for this long (before, between or within requests) is closed.
  int idle_timeout_s = 5;
  int head_timeout_s = 30;    // a request head must be complete this long after its first byte
  int write_timeout_s = 30;   // a client that reads nothing for this long is dropped (aborted)
  int io_threads = 2;         // threads that run every connection's I/O
  int handler_threads = 4;    // threads that parse, tokenize and submit requests
  int drain_timeout_s = 600;  // shutdown(): longest wait for responses still being written
  // The hidden-states connector (--kv-transfer-config); null: requests with kv_transfer_params
  // get 400. Must outlive the server.
  class HiddenExportSink* exports = nullptr;
  // POST /v1/load_drafter {"path": DIR}: loads the drafter in DIR and hands it to the engine
  // (Engine::swap_drafter); returns the new version, throws Error naming the path or field.
  // Empty: the route answers 400 (the server has no drafter).
  std::function<int(const std::string& path)> load_drafter;
  // Runtime drafter loading is opt-in (dspark serve --enable-drafter-reload), as vLLM gates
  // runtime LoRA loading: off, the route answers 404. On, only directories under
  // `drafter_root` (resolved, symlinks followed) are opened; any other path is refused with 403
  // and a message that says nothing about the path.
  bool drafter_reload = false;
  std::string drafter_root;  // canonical (dspark serve resolves --allowed-drafter-root at start)
};

class HttpServer {
 public:
  // `engine` must be started and must outlive the server.
  HttpServer(Engine& engine, ServerOptions opt);
  ~HttpServer();

  // Binds host:port (port 0 picks a free one) and returns the port. Throws Error naming --host
  // and --port when the address cannot be bound.
  int bind();
  // Accepts and serves connections until shutdown(). Call bind() first.
  void serve();
  // Graceful stop (SIGTERM): /health turns 503 and new generation requests get 503, the engine
  // drains (running and waiting requests finish), responses still being written complete, then
  // the listener stops and serve() returns. Thread-safe; later calls return at once.
  void shutdown();

  // serve() with SIGTERM and SIGINT calling shutdown() (a second signal exits at once).
  // `on_ready(port)` runs when the handlers are installed, just before connections are accepted.
  void serve_until_signal(const std::function<void(int port)>& on_ready);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dspark

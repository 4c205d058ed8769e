// HttpTransport: the event-driven HTTP/1.1 front end (Boost.Beast on Boost.Asio).
//
// A few I/O threads run every connection; a connection costs a socket and a small session, never
// a thread, so idle, slow and waiting clients (thousands of them) cannot hold up anyone else.
// Request handlers run on a separate small pool and answer through an HttpExchange, at once or
// later from any thread (a stream writes as the engine produces). What it owns, per connection:
//   - reading: the request head and body are parsed by Beast; a connection that sends nothing for
//     `idle_timeout_s` (before a request, between keep-alive requests, or within one) is closed,
//     and a request head must be complete within `head_timeout_s` (slowloris);
//   - limits: a body over `max_body_bytes` gets 413 (also when sent chunked, and before the body
//     when the client asks for 100-continue), a head over 64 KiB 431, a malformed request 400;
//     each of these closes the connection;
//   - writing: a client that reads nothing for `write_timeout_s` is dropped;
//   - a client that closes its connection while its response is pending is noticed at once
//     (the exchange's on_gone), so its engine work can be aborted;
//   - drain: begin_drain() closes idle keep-alive connections and marks every later response
//     Connection: close; wait_idle() waits for pending responses; stop() closes the rest.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dspark {

struct HttpRequest {
  std::string method;  // as sent: "GET", "POST", ...
  std::string target;  // the request target as sent
  std::string path;    // the target without its query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool has_header(std::string_view name) const;  // case-insensitive
  std::string header(std::string_view name) const;  // "" when absent
};

struct HttpResponse {
  int status = 200;
  std::string content_type;  // empty: no Content-Type (and an empty body)
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  void set_header(std::string name, std::string value);
  bool has_header(std::string_view name) const;
};

// One request's way back to its client. Thread-safe; every call is carried out in order on the
// connection's I/O strand. After the connection is gone, calls do nothing.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  // The whole response (once).
  virtual void reply(HttpResponse r) = 0;
  // A chunked response: the head now (its body is ignored), then write() pieces, then finish().
  virtual void start_stream(HttpResponse head) = 0;
  virtual void write(std::string data) = 0;
  virtual void finish() = 0;
  // Runs `fn` on the connection's strand (serialised with the calls above).
  virtual void post(std::function<void()> fn) = 0;
  // `fn` runs once, on the strand, if the connection ends before the response is complete: the
  // client closed it, a write failed or timed out, or the server stopped.
  virtual void on_gone(std::function<void()> fn) = 0;
};

using HttpHandler = std::function<void(HttpRequest&&, std::shared_ptr<HttpExchange>)>;

struct HttpTransportOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  size_t max_body_bytes = 8u << 20;
  int idle_timeout_s = 5;   // silence allowed before, between and within requests
  int head_timeout_s = 30;  // a request head must be complete this long after its first byte
  int write_timeout_s = 30;
  int max_requests_per_connection = 1000;
  int io_threads = 2;
  int handler_threads = 4;
};

class HttpTransport {
 public:
  // `handler` serves every parsed request; `error_response(status)` builds the response for a
  // request the transport refuses itself (400, 413, 431, 415).
  HttpTransport(HttpTransportOptions opt, HttpHandler handler,
                std::function<HttpResponse(int status)> error_response);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds and listens (port 0: a free one); returns the port. Throws Error naming --host and
  // --port when the address cannot be bound.
  int bind();
  // Serves until stop(); runs the I/O threads (the caller's among them).
  void serve();
  // Later responses close their connections; idle keep-alive connections are closed now.
  void begin_drain();
  // Waits up to `timeout` for every request's response to be written; whether they were.
  bool wait_idle(std::chrono::seconds timeout);
  // Closes the listener and every connection (pending exchanges get on_gone); serve() returns.
  void stop();

  size_t open_connections() const;
  size_t pending_exchanges() const;

  struct Impl;  // http_transport.cpp

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace dspark

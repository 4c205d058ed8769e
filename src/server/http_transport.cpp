#include "server/http_transport.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/error.h"

namespace dspark {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kHeaderLimit = 64 << 10;
constexpr size_t kWatchRead = 4096;           // bytes read at a time while a response is pending
constexpr size_t kMaxPipelined = 64 << 10;    // bytes of a next request kept while one runs
constexpr size_t kKeepBuffer = 16 << 10;      // an idle connection's buffer is freed above this
constexpr int kListenBacklog = 1024;
constexpr auto kLingerTime = std::chrono::seconds(2);  // reading what a refused client still sends
constexpr size_t kLingerBytes = 16u << 20;

std::string_view sv(beast::string_view s) {
  return {s.data(), s.size()};
}

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(uint8_t(x)) == std::tolower(uint8_t(y));
         });
}

template <class Headers>
bool find_header(const Headers& hs, std::string_view name, std::string* value) {
  for (const auto& [k, v] : hs)
    if (iequal(k, name)) {
      if (value) *value = v;
      return true;
    }
  return false;
}

// Lets a server hold as many connections as the hard limit allows (the soft limit is often
// 1024: 1,000 idle clients would leave nothing for real ones).
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

}  // namespace

bool HttpRequest::has_header(std::string_view name) const {
  return find_header(headers, name, nullptr);
}

std::string HttpRequest::header(std::string_view name) const {
  std::string v;
  find_header(headers, name, &v);
  return v;
}

void HttpResponse::set_header(std::string name, std::string value) {
  for (auto& [k, v] : headers)
    if (iequal(k, name)) {
      v = std::move(value);
      return;
    }
  headers.emplace_back(std::move(name), std::move(value));
}

bool HttpResponse::has_header(std::string_view name) const {
  return find_header(headers, name, nullptr);
}

class Session;

struct HttpTransport::Impl : std::enable_shared_from_this<Impl> {
  HttpTransportOptions opt;
  HttpHandler handler;
  std::function<HttpResponse(int)> error_response;
  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> work{ioc.get_executor()};
  tcp::acceptor acceptor{ioc};
  net::steady_timer accept_retry{ioc};
  net::thread_pool handlers;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};

  mutable std::mutex mu;  // sessions and pending
  std::condition_variable cv;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  size_t pending = 0;  // requests dispatched whose response is not yet written

  Impl(HttpTransportOptions o, HttpHandler h, std::function<HttpResponse(int)> e)
      : opt(std::move(o)),
        handler(std::move(h)),
        error_response(std::move(e)),
        handlers(size_t(std::max(1, opt.handler_threads))) {}

  void accept();
  void add_pending(int delta) {
    {
      std::lock_guard<std::mutex> lock(mu);
      pending = size_t(int64_t(pending) + delta);
    }
    cv.notify_all();
  }
  template <class F>
  void for_each_session(F&& f);
};

// One connection. Every member is touched only on the connection's strand (the socket's
// executor).
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket s, std::shared_ptr<HttpTransport::Impl> t)
      : t_(std::move(t)),
        socket_(std::move(s)),
        read_timer_(socket_.get_executor()),
        write_timer_(socket_.get_executor()) {}

  ~Session() {
    std::lock_guard<std::mutex> lock(t_->mu);
    t_->sessions.erase(this);
  }

  void start() {
    {
      std::lock_guard<std::mutex> lock(t_->mu);
      t_->sessions.emplace(this, weak_from_this());
    }
    beast::error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);  // one small SSE chunk per step
    read_request();
  }

  // From begin_drain() and stop(), on the strand.
  void on_drain() {
    if (state_ == State::Reading && !request_started()) close();
  }
  void on_stop() { gone(); }

  // HttpExchange's calls, on the strand; `seq` names the request they belong to.
  void reply(uint64_t seq, HttpResponse r) {
    if (!current(seq) || response_started_) return;
    response_started_ = true;
    write_full(std::move(r));
  }
  void start_stream(uint64_t seq, HttpResponse r) {
    if (!current(seq) || response_started_) return;
    response_started_ = true;
    streaming_ = true;
    head_ = std::make_unique<http::response<http::empty_body>>(http::status(r.status), 11);
    fill_head(*head_, r);
    head_->chunked(true);
    head_sr_ = std::make_unique<http::response_serializer<http::empty_body>>(*head_);
    head_written_ = false;
    writing_ = true;
    arm_write_timer();
    http::async_write_header(socket_, *head_sr_,
                             [self = shared_from_this()](beast::error_code ec, size_t) {
                               self->on_written(ec, false);
                             });
  }
  void write(uint64_t seq, std::string data) {
    // Pieces that come before the head is written wait for it.
    if (!current(seq) || finish_requested_ || data.empty()) return;
    out_.push_back(std::move(data));
    flush();
  }
  void finish(uint64_t seq) {
    if (!current(seq)) return;
    finish_requested_ = true;
    flush();
  }
  void set_on_gone(uint64_t seq, std::function<void()> fn) {
    if (seq != seq_ || response_done_) return;
    if (closed_) {
      fn();
      return;
    }
    on_gone_ = std::move(fn);
  }

  net::any_io_executor executor() { return socket_.get_executor(); }

 private:
  enum class State { Reading, Pending };

  bool current(uint64_t seq) const {
    return !closed_ && seq == seq_ && state_ == State::Pending && !response_done_;
  }
  bool request_started() const { return buffer_.size() > 0 || head_started_; }

  // --- reading a request
  void read_request() {
    if (closed_) return;
    // Draining: a kept-alive connection is not given another request (a new one still is,
    // and is told 503 by the handler).
    if (t_->draining && served_ > 0 && buffer_.size() == 0) return close();
    state_ = State::Reading;
    parser_.emplace();
    parser_->header_limit(uint32_t(kHeaderLimit));
    parser_->body_limit(uint64_t(t_->opt.max_body_bytes));
    header_checked_ = false;
    head_started_ = buffer_.size() > 0;
    head_start_ = Clock::now();
    if (buffer_.size() == 0 && buffer_.capacity() > kKeepBuffer) buffer_ = beast::flat_buffer();
    read_some();
  }

  void read_some() {
    auto deadline = Clock::now() + std::chrono::seconds(t_->opt.idle_timeout_s);
    if (head_started_ && !parser_->is_header_done())
      deadline = std::min(deadline, head_start_ + std::chrono::seconds(t_->opt.head_timeout_s));
    read_timer_.expires_at(deadline);
    read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->close();  // silent too long (or a head too slow): the read fails
    });
    http::async_read_some(socket_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            self->on_read(ec, n);
                          });
  }

  void on_read(beast::error_code ec, size_t n) {
    read_timer_.cancel();
    if (closed_) return;
    if (n > 0 && !head_started_) {
      head_started_ = true;
      head_start_ = Clock::now();
    }
    if (ec == http::error::body_limit) return refuse(413);
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) return refuse(431);
    if (ec == http::error::end_of_stream || ec == http::error::partial_message) return close();
    if (ec) {
      // A request Beast could not parse gets 400; a socket error or a time-out just ends.
      if (ec.category() == http::make_error_code(http::error::bad_target).category())
        return refuse(400);
      return close();
    }
    if (parser_->is_header_done() && !header_checked_) {
      header_checked_ = true;
      const auto& h = parser_->get();
      const auto enc = h[http::field::content_encoding];
      if (!enc.empty() && !iequal(sv(enc), "identity")) return refuse(415);
      if (iequal(sv(h[http::field::expect]), "100-continue") && !parser_->is_done()) {
        cont_ = std::make_unique<http::response<http::empty_body>>(http::status::continue_, 11);
        http::async_write(socket_, *cont_,
                          [self = shared_from_this()](beast::error_code ec2, size_t) {
                            if (ec2) return self->close();
                            self->read_some();
                          });
        return;
      }
    }
    if (!parser_->is_done()) return read_some();
    dispatch();
  }

  // A request the transport answers itself; the connection closes after it.
  void refuse(int status) {
    if (parser_ && parser_->is_header_done())
      request_id_ = std::string(parser_->get()["x-request-id"]);
    else
      request_id_.clear();
    state_ = State::Pending;
    ++seq_;
    counted_ = false;
    response_started_ = true;
    response_done_ = false;
    keep_alive_req_ = false;
    head_request_ = false;
    HttpResponse r = t_->error_response(status);
    r.set_header("Connection", "close");
    write_full(std::move(r));
  }

  void dispatch() {
    http::request<http::string_body> msg = parser_->release();
    parser_.reset();
    ++served_;
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.path = req.target.substr(0, req.target.find('?'));
    for (const auto& f : msg) req.headers.emplace_back(f.name_string(), f.value());
    req.body = std::move(msg.body());
    keep_alive_req_ = msg.keep_alive();
    head_request_ = msg.method() == http::verb::head;
    request_id_ = req.header("x-request-id");

    state_ = State::Pending;
    ++seq_;
    response_started_ = response_done_ = streaming_ = finish_requested_ = head_written_ = false;
    out_.clear();
    counted_ = true;
    t_->add_pending(+1);
    watch();

    class Exchange final : public HttpExchange {
     public:
      Exchange(std::shared_ptr<Session> s, uint64_t seq) : s_(std::move(s)), seq_(seq) {}
      void reply(HttpResponse r) override {
        on_strand([s = s_, q = seq_, r = std::move(r)]() mutable { s->reply(q, std::move(r)); });
      }
      void start_stream(HttpResponse r) override {
        on_strand(
            [s = s_, q = seq_, r = std::move(r)]() mutable { s->start_stream(q, std::move(r)); });
      }
      void write(std::string d) override {
        on_strand([s = s_, q = seq_, d = std::move(d)]() mutable { s->write(q, std::move(d)); });
      }
      void finish() override {
        on_strand([s = s_, q = seq_] { s->finish(q); });
      }
      void post(std::function<void()> fn) override { on_strand(std::move(fn)); }
      void on_gone(std::function<void()> fn) override {
        on_strand([s = s_, q = seq_, fn = std::move(fn)]() mutable {
          s->set_on_gone(q, std::move(fn));
        });
      }

     private:
      void on_strand(std::function<void()> f) { net::post(s_->executor(), std::move(f)); }
      std::shared_ptr<Session> s_;
      uint64_t seq_;
    };
    auto ex = std::make_shared<Exchange>(shared_from_this(), seq_);
    auto impl = t_;
    net::post(t_->handlers, [impl, req = std::move(req), ex]() mutable {
      try {
        impl->handler(std::move(req), ex);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "dspark serve: internal error: %s\n", e.what());
        ex->reply(impl->error_response(500));
      }
    });
  }

  // While a response is pending, a read notices a client that leaves (and keeps the bytes of
  // a pipelined next request).
  void watch() {
    if (closed_ || watching_ || buffer_.size() >= kMaxPipelined) return;
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(kWatchRead),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->on_watch(ec, n);
                            });
  }

  void on_watch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (n > 0) buffer_.commit(n);
    if (closed_) return;
    if (lingering_) return drain_read();
    if (state_ == State::Reading) return read_request();  // the response ended meanwhile
    if (ec == net::error::operation_aborted) return;
    if (ec) return gone();  // the client closed or reset the connection
    watch();
  }

  // --- writing
  template <class Msg>
  void fill_head(Msg& m, const HttpResponse& r) {
    for (const auto& [k, v] : r.headers)
      if (!iequal(k, "Connection") && !iequal(k, "Content-Length")) m.set(k, v);
    if (!r.content_type.empty()) m.set(http::field::content_type, r.content_type);
    if (!request_id_.empty() && !r.has_header("x-request-id")) m.set("x-request-id", request_id_);
    std::string conn;
    const bool close_asked = find_header(r.headers, "Connection", &conn) && iequal(conn, "close");
    keep_alive_ = keep_alive_req_ && !close_asked && !t_->draining &&
                  served_ < t_->opt.max_requests_per_connection;
    m.keep_alive(keep_alive_);
    if (keep_alive_)
      m.set(http::field::keep_alive, "timeout=" + std::to_string(t_->opt.idle_timeout_s) +
                                         ", max=" +
                                         std::to_string(t_->opt.max_requests_per_connection));
  }

  void write_full(HttpResponse r) {
    full_ = std::make_unique<http::response<http::string_body>>(http::status(r.status), 11);
    fill_head(*full_, r);
    full_->body() = std::move(r.body);
    full_->prepare_payload();
    if (head_request_) full_->body().clear();  // HEAD: the length of what GET would send
    writing_ = true;
    arm_write_timer();
    http::async_write(socket_, *full_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_written(ec, true);
    });
  }

  void flush() {
    if (closed_ || writing_ || !streaming_ || !head_written_) return;
    if (!out_.empty()) {
      pending_out_.clear();
      for (std::string& s : out_) pending_out_ += s;
      out_.clear();
      writing_ = true;
      arm_write_timer();
      net::async_write(socket_, http::make_chunk(net::buffer(pending_out_)),
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         self->on_written(ec, false);
                       });
    } else if (finish_requested_) {
      writing_ = true;
      arm_write_timer();
      net::async_write(socket_, http::make_chunk_last(),
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         self->on_written(ec, true);
                       });
    }
  }

  void arm_write_timer() {
    write_timer_.expires_after(std::chrono::seconds(t_->opt.write_timeout_s));
    write_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->gone();  // the client reads nothing
    });
  }

  void on_written(beast::error_code ec, bool last) {
    write_timer_.cancel();
    writing_ = false;
    if (closed_) return;
    if (ec) return gone();
    if (!last) {
      head_written_ = true;
      return flush();
    }
    response_complete();
  }

  void response_complete() {
    response_done_ = true;
    full_.reset();
    head_sr_.reset();
    head_.reset();
    pending_out_ = std::string();
    on_gone_ = nullptr;
    if (counted_) {
      counted_ = false;
      t_->add_pending(-1);
    }
    if (!keep_alive_) return linger();
    state_ = State::Reading;
    if (watching_) {
      socket_.cancel();  // on_watch goes on to read the next request
      return;
    }
    read_request();
  }

  // Closes after a response that ends the connection: the write side now, then reads (and
  // drops) what the client is still sending for a short while, so that its unread bytes do
  // not turn the close into a reset that loses the response.
  void linger() {
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    lingering_ = true;
    read_timer_.expires_after(kLingerTime);
    read_timer_.async_wait([self = shared_from_this()](beast::error_code e) {
      if (!e) self->close();
    });
    if (watching_) {
      socket_.cancel();  // on_watch goes on to drain_read()
      return;
    }
    drain_read();
  }
  void drain_read() {
    if (closed_) return;
    buffer_.clear();
    socket_.async_read_some(buffer_.prepare(kWatchRead),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->lingered_ += n;
                              if (ec || self->lingered_ > kLingerBytes) return self->close();
                              self->drain_read();
                            });
  }

  // The connection ended before its response was complete: tell the exchange.
  void gone() {
    auto fn = std::move(on_gone_);
    on_gone_ = nullptr;
    close();
    if (fn && !response_done_) fn();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    read_timer_.cancel();
    write_timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    if (counted_) {
      counted_ = false;
      t_->add_pending(-1);
    }
    out_.clear();
  }

  std::shared_ptr<HttpTransport::Impl> t_;
  tcp::socket socket_;
  net::steady_timer read_timer_, write_timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool header_checked_ = false;
  bool head_started_ = false;
  Clock::time_point head_start_{};
  int served_ = 0;

  State state_ = State::Reading;
  uint64_t seq_ = 0;
  bool counted_ = false;
  bool keep_alive_req_ = false, head_request_ = false, keep_alive_ = false;
  std::string request_id_;
  bool response_started_ = false, response_done_ = false;
  bool streaming_ = false, head_written_ = false, finish_requested_ = false, writing_ = false;
  bool watching_ = false, closed_ = false, lingering_ = false;
  size_t lingered_ = 0;
  std::function<void()> on_gone_;
  std::unique_ptr<http::response<http::empty_body>> cont_;
  std::unique_ptr<http::response<http::string_body>> full_;
  std::unique_ptr<http::response<http::empty_body>> head_;
  std::unique_ptr<http::response_serializer<http::empty_body>> head_sr_;
  std::deque<std::string> out_;
  std::string pending_out_;
};

template <class F>
void HttpTransport::Impl::for_each_session(F&& f) {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [p, w] : sessions)
      if (auto s = w.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) net::post(s->executor(), [s, f] { f(*s); });
}

void HttpTransport::Impl::accept() {
  acceptor.async_accept(
      net::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
        if (self->stopped) return;
        if (ec) {
          // Out of descriptors or memory: wait a little rather than spin; the listener stays.
          static std::atomic<int> reported{0};
          if (ec != net::error::connection_aborted && reported.fetch_add(1) < 5)
            std::fprintf(stderr, "dspark serve: accept: %s\n", ec.message().c_str());
          self->accept_retry.expires_after(std::chrono::milliseconds(50));
          self->accept_retry.async_wait([self](beast::error_code e) {
            if (!e && !self->stopped) self->accept();
          });
          return;
        }
        std::make_shared<Session>(std::move(s), self)->start();
        self->accept();
      });
}

HttpTransport::HttpTransport(HttpTransportOptions opt, HttpHandler handler,
                             std::function<HttpResponse(int)> error_response)
    : impl_(std::make_shared<Impl>(std::move(opt), std::move(handler),
                                   std::move(error_response))) {}

HttpTransport::~HttpTransport() {
  stop();
  impl_->handlers.join();
}

int HttpTransport::bind() {
  Impl& s = *impl_;
  raise_fd_limit();
  auto fail_bind = [&](const std::string& why) {
    fail("flags --host/--port: cannot listen on ", s.opt.host, ":", s.opt.port, " (", why, ")");
  };
  beast::error_code ec;
  tcp::resolver resolver(s.ioc);
  auto results = resolver.resolve(s.opt.host, std::to_string(s.opt.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty())
    fail_bind(ec ? ec.message() : std::string("the address does not resolve"));
  const tcp::endpoint ep = results.begin()->endpoint();
  s.acceptor.open(ep.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  if (!ec) s.acceptor.listen(kListenBacklog, ec);
  if (ec) fail_bind(ec.message());
  return s.acceptor.local_endpoint().port();
}

void HttpTransport::serve() {
  Impl& s = *impl_;
  if (!s.acceptor.is_open()) fail("HttpTransport::serve: bind() first");
  if (s.stopped) return;
  s.accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, s.opt.io_threads); ++i)
    threads.emplace_back([&s] { s.ioc.run(); });
  s.ioc.run();
  for (auto& t : threads) t.join();
  // stop() closed every socket; what their aborted operations left queued runs now, so the
  // sessions they hold are freed.
  beast::error_code ec;
  s.acceptor.close(ec);
  s.ioc.restart();
  s.ioc.poll();
}

void HttpTransport::begin_drain() {
  impl_->draining = true;
  impl_->for_each_session([](Session& s) { s.on_drain(); });
}

bool HttpTransport::wait_idle(std::chrono::seconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  return impl_->cv.wait_for(lock, timeout, [&] { return impl_->pending == 0; });
}

void HttpTransport::stop() {
  Impl& s = *impl_;
  if (s.stopped.exchange(true)) return;
  net::post(s.ioc, [&s] {
    beast::error_code ec;
    s.acceptor.close(ec);
    s.accept_retry.cancel();
  });
  s.for_each_session([](Session& x) { x.on_stop(); });
  // Let the closes run, then end the I/O threads.
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.sessions.empty() || Clock::now() > deadline) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  s.work.reset();
  s.ioc.stop();
}

size_t HttpTransport::open_connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->sessions.size();
}

size_t HttpTransport::pending_exchanges() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->pending;
}

}  // namespace dspark

// The Redis backend (hiredis, blocking): three keys per sample, the manifest SET last.
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <initializer_list>
#include <set>

#include "connector/store_common.h"

namespace dspark::connector::detail {

namespace {

using json = nlohmann::json;

// A peer that closed the socket makes write() raise SIGPIPE, which ends a process that has not
// ignored it (the trainer). The signal is blocked around each command and a pending one that the
// command raised is consumed, so the failure arrives as EPIPE (a StoreError) instead.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        const timespec zero{0, 0};
        sigtimedwait(&set, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t old_;
  bool was_pending_ = false;
};

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

std::string reply_str(const redisReply* r) {
  return std::string(r->str, r->len);
}

// Redis glob metacharacters in a literal prefix.
std::string glob_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

class RedisStore final : public HiddenStatesStore {
 public:
  RedisStore(std::string url, std::string host, int port, int db, std::chrono::milliseconds timeout)
      : url_(std::move(url)), host_(std::move(host)), port_(port), db_(db), timeout_(timeout) {}

  std::string url() const override { return url_; }

  void put_sample(const HiddenSample& s) override {
    check_sample(s);
    const std::string tokens = token_bytes(s.token_ids);
    const std::string meta = dump_manifest(ok_manifest(s, tokens));
    try {
      // An older sample under this handle stops being committed before its tensors change.
      expect_integer(command({"DEL", key(s.handle, "meta")}), "DEL");
      set(key(s.handle, kHiddenStates), s.hidden_bytes);
      set(key(s.handle, kTokenIds), tokens);
      set(key(s.handle, "meta"), meta);
    } catch (const StoreError&) {
      remove_best_effort(s.handle);
      throw;
    }
  }

  void put_error(const std::string& handle, const std::string& message) override {
    check_handle(handle);
    const std::string meta = dump_manifest(error_manifest(message));
    expect_integer(command({"DEL", key(handle, kHiddenStates), key(handle, kTokenIds)}), "DEL");
    set(key(handle, "meta"), meta);
  }

  std::optional<json> get_manifest(const std::string& handle) override {
    check_handle(handle);
    const std::string k = key(handle, "meta");
    Reply r = command({"GET", k});
    if (r->type == REDIS_REPLY_NIL) return std::nullopt;
    if (r->type != REDIS_REPLY_STRING) unexpected(r.get(), "GET " + k);
    return parse_manifest_text(reply_str(r.get()), handle, url_);
  }

  HiddenSample get_sample(const std::string& handle) override {
    check_handle(handle);
    // One MGET reads the three keys at one instant: never a manifest with another put's tensors.
    const std::string km = key(handle, "meta"), kh = key(handle, kHiddenStates),
                      kt = key(handle, kTokenIds);
    Reply r = command({"MGET", km, kh, kt});
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3) unexpected(r.get(), "MGET " + km);
    const redisReply* meta = r->element[0];
    if (meta->type != REDIS_REPLY_STRING)
      throw SampleUnusable(
          SampleUnusable::Why::Missing,
          "hidden-states sample \"" + handle + "\" (" + url_ + "): no manifest " + km);
    const CheckedManifest m =
        check_manifest(parse_manifest_text(reply_str(meta), handle, url_), handle, url_);
    for (size_t i = 1; i < 3; ++i)
      if (r->element[i]->type != REDIS_REPLY_STRING)
        throw SampleUnusable(SampleUnusable::Why::Missing, "hidden-states sample \"" + handle +
                                                               "\" (" + url_ +
                                                               "): the manifest is committed but " +
                                                               (i == 1 ? kh : kt) + " is absent");
    return make_sample(handle, url_, m, reply_str(r->element[1]), reply_str(r->element[2]));
  }

  void delete_sample(const std::string& handle) override {
    check_handle(handle);
    // The manifest first: the sample stops being committed before its tensors go.
    expect_integer(
        command({"DEL", key(handle, "meta"), key(handle, kHiddenStates), key(handle, kTokenIds)}),
        "DEL");
  }

  std::vector<std::string> handles(const std::string& prefix) override {
    const std::string pattern = glob_escape(prefix) + "*:meta";
    std::set<std::string> found;  // SCAN may return a key more than once
    std::string cursor = "0";
    do {
      Reply r = command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
          r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY)
        unexpected(r.get(), "SCAN MATCH " + pattern);
      cursor = reply_str(r->element[0]);
      const redisReply* keys = r->element[1];
      for (size_t i = 0; i < keys->elements; ++i) {
        if (keys->element[i]->type != REDIS_REPLY_STRING) continue;
        std::string h = reply_str(keys->element[i]);
        h.resize(h.size() - 5);  // ":meta"
        if (h.starts_with(prefix) && valid_handle(h)) found.insert(std::move(h));
      }
    } while (cursor != "0");
    return {found.begin(), found.end()};
  }

  void reconnect() override { ctx_.reset(); }

 private:
  static std::string key(const std::string& handle, const char* part) {
    return handle + ":" + part;
  }

  timeval tv() const {
    const auto ms = timeout_.count();
    return timeval{time_t(ms / 1000), suseconds_t((ms % 1000) * 1000)};
  }

  void connect() {
    if (ctx_) return;
    std::unique_ptr<redisContext, ContextFree> c(
        redisConnectWithTimeout(host_.c_str(), port_, tv()));
    if (!c) throw StoreError(url_ + ": cannot connect: out of memory");
    if (c->err) throw StoreError(url_ + ": cannot connect: " + c->errstr);
    if (redisSetTimeout(c.get(), tv()) != REDIS_OK)
      throw StoreError(url_ + ": cannot set the socket timeout: " + c->errstr);
    ctx_ = std::move(c);
    if (db_ != 0) {
      const std::string db = std::to_string(db_);
      Reply r = command({"SELECT", db});
      if (r->type != REDIS_REPLY_STATUS) {
        ctx_.reset();
        unexpected(r.get(), "SELECT " + db);
      }
    }
  }

  // Sends one command (binary-safe arguments) and returns its reply, an error reply included.
  // A failed connect or an I/O error (a timeout too) drops the connection and throws StoreError.
  Reply command(std::initializer_list<std::string_view> args) {
    connect();
    std::vector<const char*> argv;
    std::vector<size_t> argvlen;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      argvlen.push_back(a.size());
    }
    void* raw;
    {
      SigpipeGuard guard;
      raw = redisCommandArgv(ctx_.get(), int(argv.size()), argv.data(), argvlen.data());
    }
    if (!raw) {
      const std::string err = ctx_->errstr[0] ? ctx_->errstr : "I/O error";
      ctx_.reset();
      throw StoreError(url_ + ": " + std::string(args.begin()->data(), args.begin()->size()) +
                       ": " + err);
    }
    return Reply(static_cast<redisReply*>(raw));
  }

  [[noreturn]] void unexpected(const redisReply* r, const std::string& what) const {
    if (r->type == REDIS_REPLY_ERROR) throw StoreError(url_ + ": " + what + ": " + reply_str(r));
    throw StoreError(url_ + ": " + what + ": unexpected reply type " + std::to_string(r->type));
  }

  void expect_integer(Reply r, const char* what) const {
    if (r->type != REDIS_REPLY_INTEGER) unexpected(r.get(), what);
  }

  void set(const std::string& k, const std::string& value) {
    Reply r = command({"SET", k, value});
    if (r->type == REDIS_REPLY_ERROR && reply_str(r.get()).starts_with("OOM"))
      throw StoreFull(url_ + ": SET " + k + " (" + std::to_string(value.size()) +
                      " bytes): " + reply_str(r.get()));
    if (r->type != REDIS_REPLY_STATUS) unexpected(r.get(), "SET " + k);
  }

  // After a failed put: the three keys go (DEL is allowed when Redis is out of memory).
  void remove_best_effort(const std::string& handle) noexcept {
    try {
      command({"DEL", key(handle, "meta"), key(handle, kHiddenStates), key(handle, kTokenIds)});
    } catch (...) {
    }
  }

  std::string url_, host_;
  int port_, db_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<redisContext, ContextFree> ctx_;
};

}  // namespace

std::unique_ptr<HiddenStatesStore> open_redis_store(const std::string& url, std::string host,
                                                    int port, int db,
                                                    std::chrono::milliseconds timeout) {
  return std::make_unique<RedisStore>(url, std::move(host), port, db, timeout);
}

}  // namespace dspark::connector::detail

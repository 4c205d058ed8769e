// Fixtures of the connector tests: a real redis-server on a free loopback port in a temporary
// directory (started, PINGed, killed and restarted by the test), a raw hiredis client to read and
// corrupt keys behind the store's back, and synthetic samples.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "connector/hidden_states_store.h"
#include "core/dtype.h"

namespace dspark::connector_test {

namespace fs = std::filesystem;
using connector::HiddenSample;

constexpr const char* kRedisServer = "/usr/bin/redis-server";

inline bool redis_available() {
  return ::access(kRedisServer, X_OK) == 0;
}

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() / ("dspark_connector_test_" + std::to_string(::getpid()) +
                                         "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string path() const { return path_.string(); }
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// A loopback port nothing listens on right now.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

// A plain hiredis connection, for what the store must not be trusted to check itself.
class RawRedis {
 public:
  explicit RawRedis(int port, int db = 0) {
    c_ = redisConnectWithTimeout("127.0.0.1", port, timeval{5, 0});
    if (!c_ || c_->err) throw std::runtime_error("raw redis connection failed");
    if (db) cmd({"SELECT", std::to_string(db)});
  }
  ~RawRedis() {
    if (c_) redisFree(c_);
  }
  RawRedis(const RawRedis&) = delete;
  RawRedis& operator=(const RawRedis&) = delete;

  Reply cmd(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> len;
    for (const auto& a : args) {
      argv.push_back(a.data());
      len.push_back(a.size());
    }
    auto* r =
        static_cast<redisReply*>(redisCommandArgv(c_, int(argv.size()), argv.data(), len.data()));
    if (!r) throw std::runtime_error(std::string("raw redis: ") + c_->errstr);
    return Reply(r);
  }
  std::optional<std::string> get(const std::string& key) {
    Reply r = cmd({"GET", key});
    if (r->type != REDIS_REPLY_STRING) return std::nullopt;
    return std::string(r->str, r->len);
  }
  void set(const std::string& key, const std::string& value) { cmd({"SET", key, value}); }
  std::vector<std::string> keys(const std::string& pattern) {
    Reply r = cmd({"KEYS", pattern});
    std::vector<std::string> out;
    for (size_t i = 0; i < r->elements; ++i)
      out.emplace_back(r->element[i]->str, r->element[i]->len);
    return out;
  }
  int64_t info_int(const std::string& section, const std::string& field) {
    Reply r = cmd({"INFO", section});
    std::istringstream in(std::string(r->str, r->len));
    for (std::string line; std::getline(in, line);)
      if (line.starts_with(field + ":")) return std::stoll(line.substr(field.size() + 1));
    return -1;
  }

 private:
  redisContext* c_ = nullptr;
};

// redis-server as a child process, in `dir`, on a loopback port, until stop() or destruction.
class RedisServer {
 public:
  RedisServer(std::string dir, bool aof) : dir_(std::move(dir)), aof_(aof) {
    fs::create_directories(dir_);
  }
  ~RedisServer() { stop(SIGKILL); }

  // Starts on `port` (0: a free one) and waits for PONG; false (with the log) if it never came.
  bool start(int port = 0) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = port ? port : free_port();
      if (launch() && wait_ready()) return true;
      stop(SIGKILL);
      if (port) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }
  void stop(int sig = SIGTERM) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  int port() const { return port_; }
  std::string url(int db = -1) const {
    return "redis://127.0.0.1:" + std::to_string(port_) + (db >= 0 ? "/" + std::to_string(db) : "");
  }
  std::string log() const {
    std::ifstream in(dir_ + "/redis.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  bool launch() {
    const std::string port = std::to_string(port_);
    std::vector<std::string> args = {
        kRedisServer, "--port", port, "--bind",       "127.0.0.1",        "--save",
        "",           "--dir",  dir_, "--appendonly", aof_ ? "yes" : "no"};
    if (aof_) args.insert(args.end(), {"--appendfsync", "always"});
    const std::string log = dir_ + "/redis.log";
    std::vector<char*> argv;  // built before fork: the child only makes async-signal-safe calls
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the test
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execv(kRedisServer, argv.data());
      ::_exit(127);
    }
    return true;
  }
  bool wait_ready() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;  // exited: the port was taken, or a bad flag
      }
      redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, timeval{0, 200000});
      if (c && !c->err) {
        auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
        const bool pong = r && r->type == REDIS_REPLY_STATUS && std::string(r->str) == "PONG";
        if (r) freeReplyObject(r);
        redisFree(c);
        if (pong) return true;  // (while loading the AOF it answers -LOADING)
      } else if (c) {
        redisFree(c);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::string dir_;
  bool aof_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// A sample of n tokens x layers x hidden whose values follow from `seed`. bf16 values are exact
// multiples of 1/16 (representable); f32 values use the full mantissa. `values` gets them as f32.
inline HiddenSample make_sample(const std::string& handle, int n, int layers, int hidden,
                                const std::string& dtype, uint32_t seed,
                                std::vector<float>* values = nullptr) {
  HiddenSample s;
  s.handle = handle;
  s.hidden = hidden;
  s.dtype = dtype;
  for (int l = 0; l < layers; ++l) s.layer_ids.push_back(2 * l + 1);
  for (int t = 0; t < n; ++t)
    s.token_ids.push_back(t % 3 == 0 ? -int64_t(t) - 1 : (int64_t(1) << 40) + seed * 1000 + t);
  const size_t count = size_t(n) * layers * hidden;
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = dtype == "bfloat16" ? float(int((seed * 31 + i * 7) % 241) - 120) / 16.0f
                               : std::sin(float(i) * 0.37f + float(seed)) * 3.0f;
  if (dtype == "bfloat16") {
    s.hidden_bytes.resize(count * 2);
    for (size_t i = 0; i < count; ++i) {
      const uint16_t b = f32_to_bf16(v[i]);
      std::memcpy(s.hidden_bytes.data() + 2 * i, &b, 2);
    }
  } else {
    s.hidden_bytes.resize(count * 4);
    if (count) std::memcpy(s.hidden_bytes.data(), v.data(), count * 4);
  }
  s.info = {{"request_id", "req-" + handle}, {"prompt_tokens", n}, {"server", "test"}};
  if (values) *values = std::move(v);
  return s;
}

inline void expect_same(const HiddenSample& got, const HiddenSample& want) {
  EXPECT_EQ(got.handle, want.handle);
  EXPECT_EQ(got.token_ids, want.token_ids);
  EXPECT_EQ(got.layer_ids, want.layer_ids);
  EXPECT_EQ(got.hidden, want.hidden);
  EXPECT_EQ(got.dtype, want.dtype);
  EXPECT_TRUE(got.hidden_bytes == want.hidden_bytes) << "hidden_bytes differ for " << want.handle;
  EXPECT_EQ(got.info, want.info);
}

// Waits until `pred` holds (true) or `timeout` passes (false).
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace dspark::connector_test

// ServerProcess: `dspark serve` run as a child process for a benchmark. It is started from the
// running binary (/proc/self/exe) with --port 0; the port is read from its start-up line on
// stderr, "dspark serve: listening on http://HOST:PORT (model NAME)", and GET /health must
// answer 200 before the constructor returns. stop() (or the destructor) sends SIGTERM, which
// drains the server, and waits for it (SIGKILL after a grace period). The child also gets
// SIGTERM if this process dies (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/server_api.h"

namespace dspark {

struct ServerLaunch {
  std::string exe;                 // the dspark binary ("" : this one, /proc/self/exe)
  std::string model;               // --model DIR
  std::string speculative_config;  // --speculative-config JSON ("" : plain decoding)
  int threads = -1;                // --threads N (-1: not passed)
  std::string host = "127.0.0.1";
  std::vector<std::string> extra_args;  // appended as they are
  std::string log_path;  // the server's stdout and stderr are appended here ("" : kept in memory)
  double start_timeout_s = 900;  // to the listening line and a healthy /health
};

class ServerProcess {
 public:
  // Starts the server and waits until it serves. Throws Error (with the server's last lines of
  // output) when it exits or does not listen in time.
  explicit ServerProcess(const ServerLaunch& launch);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const ServerUrl& url() const { return url_; }
  const std::string& model_name() const { return model_name_; }
  const std::vector<std::string>& command() const { return argv_; }  // argv[0] resolved
  // SIGTERM, then waits up to `grace_s` before SIGKILL. Returns the wait status text
  // ("exit 0", "signal 9"); "" if already stopped.
  std::string stop(double grace_s = 60);
  // The last lines the server printed.
  std::string output_tail() const;

 private:
  void read_output(int fd);
  [[noreturn]] void fail_start(const std::string& why);

  std::vector<std::string> argv_;
  pid_t pid_ = -1;
  std::thread reader_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> tail_;
  std::optional<std::string> listening_;  // the start-up line, once seen
  bool eof_ = false;
  ServerUrl url_;
  std::string model_name_;
};

// Parses "dspark serve: listening on http://HOST:PORT (model NAME)" into the URL and NAME;
// false when the line is not that line.
bool parse_listening_line(const std::string& line, std::string& url, std::string& model);

}  // namespace dspark

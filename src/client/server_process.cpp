#include "client/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace dspark {

namespace {

constexpr size_t kTailLines = 40;
const std::string kListening = "dspark serve: listening on ";

std::string status_text(int st) {
  if (WIFEXITED(st)) return "exit " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return "signal " + std::to_string(WTERMSIG(st));
  return "status " + std::to_string(st);
}

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) fail("cannot resolve /proc/self/exe: ", std::strerror(errno));
  return std::string(buf, size_t(n));
}

}  // namespace

bool parse_listening_line(const std::string& line, std::string& url, std::string& model) {
  const size_t at = line.find(kListening);
  if (at == std::string::npos) return false;
  const size_t u0 = at + kListening.size();
  const size_t u1 = line.find(' ', u0);
  url = line.substr(u0, u1 == std::string::npos ? std::string::npos : u1 - u0);
  model.clear();
  if (u1 != std::string::npos) {
    const std::string tag = "(model ";
    const size_t m0 = line.find(tag, u1);
    const size_t m1 = line.rfind(')');
    if (m0 != std::string::npos && m1 != std::string::npos && m1 > m0 + tag.size())
      model = line.substr(m0 + tag.size(), m1 - m0 - tag.size());
  }
  return url.rfind("http://", 0) == 0;
}

ServerProcess::ServerProcess(const ServerLaunch& l) {
  // This binary is run through /proc/self/exe (the same image even if the file was rebuilt
  // since); the command shows its resolved path.
  const std::string exec_path = l.exe.empty() ? "/proc/self/exe" : l.exe;
  const std::string exe = l.exe.empty() ? self_exe() : l.exe;
  argv_ = {exe, "serve", "--model", l.model, "--host", l.host, "--port", "0"};
  if (!l.speculative_config.empty()) {
    argv_.push_back("--speculative-config");
    argv_.push_back(l.speculative_config);
  }
  if (l.threads >= 0) {
    argv_.push_back("--threads");
    argv_.push_back(std::to_string(l.threads));
  }
  for (const auto& a : l.extra_args) argv_.push_back(a);
  std::vector<char*> cargv;
  for (auto& a : argv_) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) fail("pipe: ", std::strerror(errno));
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) {
    close(fds[0]);
    close(fds[1]);
    fail("fork: ", std::strerror(errno));
  }
  if (pid_ == 0) {  // child: only async-signal-safe calls until exec
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execv(exec_path.c_str(), cargv.data());
    _exit(127);
  }
  close(fds[1]);
  std::shared_ptr<std::ofstream> log;
  if (!l.log_path.empty()) {
    log = std::make_shared<std::ofstream>(l.log_path, std::ios::app);
    if (!*log) {
      stop(5);
      fail("cannot open the server log ", l.log_path);
    }
  }
  reader_ = std::thread([this, fd = fds[0], log] {
    std::string partial;
    char buf[4096];
    for (;;) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (log) {
        log->write(buf, n);
        log->flush();
      }
      partial.append(buf, size_t(n));
      for (size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
        std::string line = partial.substr(0, nl);
        partial.erase(0, nl + 1);
        std::lock_guard<std::mutex> g(mu_);
        if (!listening_ && line.find(kListening) != std::string::npos) listening_ = line;
        tail_.push_back(std::move(line));
        if (tail_.size() > kTailLines) tail_.pop_front();
        cv_.notify_all();
      }
    }
    close(fd);
    std::lock_guard<std::mutex> g(mu_);
    if (!partial.empty()) tail_.push_back(partial);
    eof_ = true;
    cv_.notify_all();
  });

  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(l.start_timeout_s));
  std::string line;
  {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait_until(g, deadline, [&] { return listening_.has_value() || eof_; });
    if (listening_) line = *listening_;
  }
  if (line.empty())
    fail_start(eof_ ? "it exited before listening" : "no listening line within the start timeout");
  std::string url_text;
  if (!parse_listening_line(line, url_text, model_name_))
    fail_start("cannot read the address in '" + line + "'");
  try {
    url_ = parse_server_url(url_text, "the server's listening line");
  } catch (const Error& e) {
    fail_start(e.what());
  }
  for (;;) {
    if (http_get(url_, "/health", "", 5).status == 200) break;
    if (std::chrono::steady_clock::now() > deadline) fail_start("GET /health never answered 200");
    {
      std::unique_lock<std::mutex> g(mu_);
      if (eof_) fail_start("it exited after listening");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void ServerProcess::fail_start(const std::string& why) {
  const std::string st = stop(10);
  fail("dspark serve (", argv_.size() > 4 ? argv_[3] : "", "): ", why,
       st.empty() ? "" : " (" + st + ")", "; its last output:\n", output_tail());
}

ServerProcess::~ServerProcess() {
  stop();
}

std::string ServerProcess::stop(double grace_s) {
  std::string result;
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int st = 0;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(grace_s));
    pid_t r;
    while ((r = waitpid(pid_, &st, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (r == 0) {
      kill(pid_, SIGKILL);
      r = waitpid(pid_, &st, 0);
    }
    result = r == pid_ ? status_text(st) : "lost";
    pid_ = -1;
  }
  if (reader_.joinable()) reader_.join();
  return result;
}

std::string ServerProcess::output_tail() const {
  std::lock_guard<std::mutex> g(mu_);
  std::string s;
  for (const auto& l : tail_) s += "  " + l + "\n";
  return s.empty() ? "  (nothing)\n" : s;
}

}  // namespace dspark

#include "train/progress.h"

#include <unistd.h>

#include <cmath>

#include "core/error.h"
#include "core/timer.h"

namespace dspark::train {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = int64_t(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", long(t / 3600), long(t / 60 % 60), long(t % 60));
  return buf;
}

Progress::Progress(int64_t total_steps, const std::string& log_path, bool append)
    : total_(total_steps), tty_(::isatty(2)), start_(now_seconds()) {
  if (!log_path.empty()) {
    log_ = std::fopen(log_path.c_str(), append ? "a" : "w");
    if (!log_) fail(log_path, ": cannot open the training log for writing");
  }
}

Progress::~Progress() {
  if (log_) std::fclose(log_);
}

void Progress::set_total(int64_t total_steps) {
  std::lock_guard<std::mutex> lock(mu_);
  total_ = total_steps;
}

void Progress::set_status(std::string status) {
  std::lock_guard<std::mutex> lock(mu_);
  status_ = std::move(status);
}

void Progress::step(int64_t step, int64_t tokens, nlohmann::json f) {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = now_seconds();
  if (start_step_ < 0) {
    start_step_ = step;
    start_tokens_ = tokens;
    start_ = now;
  }
  const double elapsed = now - start_;
  const double tok_s = elapsed > 0 ? double(tokens - start_tokens_) / elapsed : 0;
  const double steps_done = double(step - start_step_ + 1);
  const double eta = steps_done > 0 ? elapsed / steps_done * double(total_ - step - 1) : 0;
  f["step"] = step;
  f["tokens"] = tokens;
  f["tok_s"] = tok_s;
  f["elapsed_s"] = elapsed;
  if (log_) {
    std::fprintf(log_, "%s\n", f.dump().c_str());
    std::fflush(log_);
  }
  if (tty_ || now - last_print_ >= 30 || step + 1 == total_) {
    last_print_ = now;
    const int width = 24;
    const int filled = int(width * double(step + 1) / double(std::max<int64_t>(total_, 1)));
    std::string bar(size_t(filled), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "%s[%s] %ld/%ld loss %.4f | %.0f tok/s | lr %.2e | ETA %s%s%s%s", tty_ ? "\r" : "",
                 bar.c_str(), long(step + 1), long(total_), f["loss"].get<double>(), tok_s, f.value("lr", 0.0),
                 format_duration(eta).c_str(), status_.empty() ? "" : " | ", status_.c_str(), tty_ ? "   " : "\n");
    std::fflush(stderr);
  }
}

void Progress::event(nlohmann::json f) {
  std::lock_guard<std::mutex> lock(mu_);
  if (log_) {
    std::fprintf(log_, "%s\n", f.dump().c_str());
    std::fflush(log_);
  }
  if (tty_) std::fprintf(stderr, "\n");
  std::fprintf(stderr, "%s\n", f.dump().c_str());
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace dspark::train

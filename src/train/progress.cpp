#include "train/progress.h"

#include <cmath>

#include "core/error.h"
#include "core/timer.h"

namespace dspark::train {

Progress::Progress(int64_t total_steps, const std::string& log_path, bool append)
    : bar_("", total_steps, true, /*tty_interval=*/0), start_(now_seconds()) {
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
  bar_.set_total(total_steps);
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
  const int64_t total = bar_.total();
  const double elapsed = now - start_;
  const double tok_s = elapsed > 0 ? double(tokens - start_tokens_) / elapsed : 0;
  const double steps_done = double(step - start_step_ + 1);
  const double eta = steps_done > 0 ? elapsed / steps_done * double(total - step - 1) : 0;
  f["step"] = step;
  f["tokens"] = tokens;
  f["tok_s"] = tok_s;
  f["elapsed_s"] = elapsed;
  if (log_) {
    std::fprintf(log_, "%s\n", f.dump().c_str());
    std::fflush(log_);
  }
  if (bar_.due(/*force=*/step + 1 == total)) {
    char figures[160];
    std::snprintf(figures, sizeof figures, " loss %.4f | %.0f tok/s | lr %.2e | ETA %s", f["loss"].get<double>(),
                  tok_s, f.value("lr", 0.0), format_duration(eta).c_str());
    bar_.draw(step + 1, status_.empty() ? std::string(figures) : figures + (" | " + status_));
  }
}

void Progress::event(nlohmann::json f) {
  std::lock_guard<std::mutex> lock(mu_);
  if (log_) {
    std::fprintf(log_, "%s\n", f.dump().c_str());
    std::fflush(log_);
  }
  bar_.end_line();
  std::fprintf(stderr, "%s\n", f.dump().c_str());
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  bar_.end_line();
}

}  // namespace dspark::train

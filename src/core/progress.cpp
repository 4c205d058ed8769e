#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/timer.h"

namespace dspark {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = int64_t(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", long(t / 3600), long(t / 60 % 60), long(t % 60));
  return buf;
}

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled, double tty_interval)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      tty_(::isatty(2) != 0),
      tty_interval_(tty_interval),
      start_(now_seconds()) {}

bool ProgressBar::due(bool force) {
  if (!enabled_) return false;
  const double now = now_seconds();
  if (!force && now - last_ < (tty_ ? tty_interval_ : 30.0)) return false;
  last_ = now;
  return true;
}

void ProgressBar::draw(int64_t done, const std::string& figures) {
  if (!enabled_) return;
  const int width = 24;
  const int filled = total_ > 0 ? int(width * std::clamp(double(done) / double(total_), 0.0, 1.0)) : width;
  std::string bar(size_t(filled), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "%s%s%s[%s] %ld/%ld%s%s", tty_ ? "\r" : "", label_.c_str(), label_.empty() ? "" : " ",
               bar.c_str(), long(done), long(total_), figures.c_str(), tty_ ? "   " : "\n");
  std::fflush(stderr);
}

void ProgressBar::end_line() {
  if (enabled_ && tty_) std::fprintf(stderr, "\n");
}

void ProgressBar::update(int64_t done, int64_t tokens, bool force) {
  if (!due(force)) return;
  const double elapsed = last_ - start_;
  const double tok_s = elapsed > 0 ? double(tokens) / elapsed : 0;
  const double eta = done > 0 ? elapsed / double(done) * double(total_ - done) : NAN;
  char figures[160];
  std::snprintf(figures, sizeof figures, " | %.0f tok/s | %s elapsed | ETA %s", tok_s,
                format_duration(elapsed).c_str(), format_duration(eta).c_str());
  draw(done, figures);
}

void ProgressBar::finish(int64_t done, int64_t tokens) {
  update(done, tokens, true);
  end_line();
}

}  // namespace dspark

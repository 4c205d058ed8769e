#include "datagen/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/timer.h"

namespace dspark::datagen {

std::string format_seconds(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = int64_t(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", long(t / 3600), long(t / 60 % 60), long(t % 60));
  return buf;
}

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), tty_(::isatty(2) != 0), start_(now_seconds()) {}

void ProgressBar::update(int64_t done, int64_t tokens, bool force) {
  if (!enabled_) return;
  const double now = now_seconds();
  if (!force && now - last_ < (tty_ ? 0.25 : 30.0)) return;
  last_ = now;
  const double elapsed = now - start_;
  const double tok_s = elapsed > 0 ? double(tokens) / elapsed : 0;
  const double eta = done > 0 ? elapsed / double(done) * double(total_ - done) : NAN;
  const int width = 24;
  const int filled = total_ > 0 ? int(width * std::min(1.0, double(done) / double(total_))) : width;
  std::string bar(size_t(filled), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "%s%s [%s] %ld/%ld | %.0f tok/s | %s elapsed | ETA %s%s", tty_ ? "\r" : "", label_.c_str(),
               bar.c_str(), long(done), long(total_), tok_s, format_seconds(elapsed).c_str(),
               format_seconds(eta).c_str(), tty_ ? "   " : "\n");
  std::fflush(stderr);
}

void ProgressBar::finish(int64_t done, int64_t tokens) {
  if (!enabled_) return;
  update(done, tokens, true);
  if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace dspark::datagen

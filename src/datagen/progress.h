// A one-line progress bar on stderr for the data-generation commands: items done, tokens/s, ETA.
#pragma once

#include <cstdint>
#include <string>

namespace dspark::datagen {

class ProgressBar {
 public:
  // `enabled` false prints nothing. On a terminal the line is redrawn in place (at most 4 times
  // a second); otherwise a line is printed every 30 s and at the end.
  ProgressBar(std::string label, int64_t total, bool enabled);
  // `done` items out of total, `tokens` processed so far (for tokens/s).
  void update(int64_t done, int64_t tokens, bool force = false);
  void finish(int64_t done, int64_t tokens);

 private:
  std::string label_;
  int64_t total_;
  bool enabled_, tty_;
  double start_, last_ = -1e30;
};

std::string format_seconds(double s);  // h:mm:ss, "?" when unknown

}  // namespace dspark::datagen

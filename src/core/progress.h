// ProgressBar: the one progress line on stderr, for data generation and training: a label, a bar,
// done/total and the caller's figures. On a terminal the line is redrawn in place (at most every
// `tty_interval` seconds); otherwise a line is printed every 30 s, and whenever forced (the end).
#pragma once

#include <cstdint>
#include <string>

namespace dspark {

// h:mm:ss; "?" when unknown (not finite, or negative).
std::string format_duration(double seconds);

class ProgressBar {
 public:
  // `enabled` false prints nothing. An empty label starts the line with the bar.
  ProgressBar(std::string label, int64_t total, bool enabled = true, double tty_interval = 0.25);

  // The data-generation line: `done` items out of total, `tokens` processed so far, with tokens/s,
  // the time elapsed and the ETA.
  void update(int64_t done, int64_t tokens, bool force = false);
  void finish(int64_t done, int64_t tokens);  // the last line (forced), ended on a terminal

  // Building blocks for a line of one's own figures: due() says whether a line is due now (and
  // counts it as printed); draw() prints "<label> [####....] done/total<figures>"; end_line()
  // moves a terminal past the redrawn line.
  bool due(bool force = false);
  void draw(int64_t done, const std::string& figures);
  void end_line();

  void set_total(int64_t total) { total_ = total; }
  int64_t total() const { return total_; }
  bool tty() const { return tty_; }

 private:
  std::string label_;
  int64_t total_;
  bool enabled_, tty_;
  double tty_interval_;
  double start_, last_ = -1e30;
};

}  // namespace dspark

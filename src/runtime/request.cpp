#include "runtime/request.h"

#include <algorithm>

#include "core/error.h"

namespace dspark {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const auto& s : stops_) {
    if (s.empty()) fail("stop strings must not be empty");
    hold_ = std::max(hold_, s.size() - 1);
  }
}

std::string StopStringFilter::push(const std::string& piece) {
  if (stopped_) return "";
  pending_ += piece;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = pending_.find(s);
    if (at < cut) {
      cut = at;
      matched_ = s;
    }
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  if (pending_.size() <= hold_) return "";
  // Keep the last hold_ bytes, but never split a UTF-8 character.
  size_t emit = pending_.size() - hold_;
  while (emit > 0 && (uint8_t(pending_[emit]) & 0xC0) == 0x80) --emit;
  std::string out = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return out;
}

std::string StopStringFilter::flush() {
  std::string out;
  out.swap(pending_);
  return stopped_ ? "" : out;
}

}  // namespace dspark

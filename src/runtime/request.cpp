#include "runtime/request.h"

#include <algorithm>

#include "core/error.h"

namespace dspark {

void GenerateParams::validate() const {
  sampling.validate();
  check_logprobs(logprobs, "logprobs");
  check_logprobs(prompt_logprobs, "prompt_logprobs");
  if (max_tokens != kAsManyAsFit && !(max_tokens == 0 && prompt_logprobs >= 0))
    check_max_tokens(max_tokens);
  check_stop_strings(stop_strings);
}

void check_max_tokens(int64_t max_tokens, const std::string& field) {
  if (max_tokens < 1)
    fail_request(ErrorKind::InvalidRequest, field, field, " must be at least 1, got ", max_tokens);
}

void check_logprobs(int64_t n, const std::string& field) {
  if (n < -1 || n > kMaxLogprobs)
    fail_request(ErrorKind::InvalidRequest, field, field, " must be in [0, ", kMaxLogprobs,
                 "], got ", n);
}

void check_stop_strings(const std::vector<std::string>& stops) {
  if (stops.size() > kMaxStopStrings)
    fail_request(ErrorKind::InvalidRequest, "stop", "'stop' may hold at most ", kMaxStopStrings,
                 " strings");
  for (const std::string& s : stops)
    if (s.empty()) fail_request(ErrorKind::InvalidRequest, "stop", "'stop' strings must not be empty");
}

void check_token_ids(std::span<const int32_t> ids, int vocab, const std::string& field) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      fail_request(ErrorKind::InvalidRequest, field, field, ": token id ", ids[i], " at index ", i,
                   " is outside the vocabulary [0, ", vocab, ")");
}

StopStringFilter::StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  check_stop_strings(stops_);
  for (const auto& s : stops_) hold_ = std::max(hold_, s.size() - 1);
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

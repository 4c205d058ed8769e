#include "client/sse.h"

namespace dspark {

void SseParser::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (c == '\n' && last_was_cr_) {  // the "\n" of a "\r\n" already ended its line
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = c == '\r';
    if (c == '\n' || c == '\r') {
      line(partial_);
      partial_.clear();
    } else {
      partial_ += c;
    }
  }
}

void SseParser::finish() {
  if (!partial_.empty()) line(partial_);
  partial_.clear();
  line("");
}

void SseParser::line(std::string_view l) {
  if (l.empty()) {  // end of event
    if (has_data_) on_event_(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (l.front() == ':') return;  // comment (keep-alive)
  const size_t colon = l.find(':');
  const std::string_view field = l.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view() : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

}  // namespace dspark

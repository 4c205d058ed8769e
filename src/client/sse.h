// SseParser: splits a text/event-stream body, fed in arbitrary pieces as it arrives, into events.
// Lines are "field: value"; an event ends at a blank line. Only `data` matters to the benchmark:
// several data lines of one event are joined with "\n". Comment lines (": ...") and the other
// fields (event, id, retry) are skipped. Lines end in "\n", "\r\n" or "\r".
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace dspark {

class SseParser {
 public:
  // Called with each complete event's data (events without data lines are not reported).
  using EventFn = std::function<void(const std::string& data)>;
  explicit SseParser(EventFn on_event) : on_event_(std::move(on_event)) {}

  void feed(std::string_view bytes);
  // The body ended: a last event that lacked its blank line is delivered.
  void finish();

 private:
  void line(std::string_view l);
  EventFn on_event_;
  std::string partial_;  // bytes of an unfinished line
  std::string data_;     // data lines of the current event
  bool has_data_ = false;
  bool last_was_cr_ = false;
};

}  // namespace dspark

// The regenerated-data JSONL file: one record per prompt,
//   {"id": N, "input_ids": [...], "loss_mask": [0.., 1..], "prompt_tokens": P, "finish_reason": "stop"|"length"}
// input_ids are the chat-templated prompt followed by the target's response (its stop token
// included); loss_mask is 1 exactly on response tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dspark::datagen {

struct RegenRecord {
  int64_t id = -1;
  std::vector<int32_t> input_ids;
  std::vector<uint8_t> loss_mask;
  int prompt_tokens = 0;
  std::string finish_reason;

  int64_t loss_tokens() const;
};

// One JSON line, no newline; keys in the order above.
std::string regen_record_line(const RegenRecord& r);

// Parses line `line_number` (1-based) of `path`; a malformed line or a record that breaks the
// format throws Error naming the file, the line and the field. (Readers that keep only offsets
// re-parse a record when they need it.)
RegenRecord parse_regen_line(std::string_view line, const std::string& path, int64_t line_number);

// Walks the complete lines of regenerated data `text` (the contents of `path`): each non-empty
// line is parsed (parse_regen_line) and handed to `on_record` with its text and 1-based number;
// an id seen on an earlier line throws Error naming both lines. Returns the bytes up to the end of
// the last complete line: less than text.size() when the last line never got its newline.
uint64_t for_each_regen_record(
    std::string_view text, const std::string& path,
    const std::function<void(RegenRecord&& record, std::string_view line, int64_t number)>& on_record);

struct RegenFile {
  std::vector<RegenRecord> records;
  uint64_t good_bytes = 0;     // bytes up to the end of the last complete line
  uint32_t crc32 = 0;          // of those bytes: identifies the records (a partial tail left out)
  bool truncated_tail = false; // the file ended in a partial line (a crash mid-write)
};

// Reads a regeneration output. A last line without its newline is a partial write: it is left
// out and reported through truncated_tail, not an error. Any other malformed line, or a record
// that breaks the format (lengths, mask values, duplicate ids, ids < 0), throws Error naming
// the file and line. A missing file reads as empty when `missing_ok`.
RegenFile read_regen_file(const std::string& path, bool missing_ok = false);

}  // namespace dspark::datagen

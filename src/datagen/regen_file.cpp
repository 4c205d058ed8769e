#include "datagen/regen_file.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/crc32.h"
#include "core/error.h"
#include "core/mmap_file.h"

namespace dspark::datagen {

int64_t RegenRecord::loss_tokens() const {
  int64_t n = 0;
  for (uint8_t m : loss_mask) n += m;
  return n;
}

std::string regen_record_line(const RegenRecord& r) {
  nlohmann::ordered_json j;
  j["id"] = r.id;
  j["input_ids"] = r.input_ids;
  j["loss_mask"] = r.loss_mask;
  j["prompt_tokens"] = r.prompt_tokens;
  j["finish_reason"] = r.finish_reason;
  return j.dump();
}

RegenRecord parse_regen_line(std::string_view line, const std::string& path, int64_t number) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ":", number, ": not valid JSON (", e.what(), ")");
  }
  auto where = [&](const char* field) { return path + ":" + std::to_string(number) + ": field \"" + field + "\""; };
  if (!j.is_object()) fail(path, ":", number, ": expected a JSON object");
  RegenRecord r;
  try {
    if (!j.contains("id") || !j["id"].is_number_integer()) fail(where("id"), " must be an integer");
    r.id = j["id"].get<int64_t>();
    if (r.id < 0) fail(where("id"), " must not be negative");
    if (!j.contains("input_ids") || !j["input_ids"].is_array()) fail(where("input_ids"), " must be a list");
    r.input_ids.reserve(j["input_ids"].size());
    for (const auto& x : j["input_ids"]) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
        fail(where("input_ids"), " must hold non-negative token ids");
      r.input_ids.push_back(int32_t(x.get<int64_t>()));
    }
    if (!j.contains("loss_mask") || !j["loss_mask"].is_array()) fail(where("loss_mask"), " must be a list");
    r.loss_mask.reserve(j["loss_mask"].size());
    for (const auto& x : j["loss_mask"]) {
      if (!x.is_number_integer() || (x.get<int64_t>() != 0 && x.get<int64_t>() != 1))
        fail(where("loss_mask"), " must hold 0 or 1");
      r.loss_mask.push_back(uint8_t(x.get<int64_t>()));
    }
    if (r.loss_mask.size() != r.input_ids.size())
      fail(where("loss_mask"), " has ", r.loss_mask.size(), " entries but input_ids ", r.input_ids.size());
    if (r.input_ids.empty()) fail(where("input_ids"), " is empty");
    if (!j.contains("prompt_tokens") || !j["prompt_tokens"].is_number_integer()) fail(where("prompt_tokens"), " must be an integer");
    const int64_t p = j["prompt_tokens"].get<int64_t>();
    if (p < 0 || p > int64_t(r.input_ids.size())) fail(where("prompt_tokens"), " is outside [0, ", r.input_ids.size(), "]");
    r.prompt_tokens = int(p);
    for (int i = 0; i < r.prompt_tokens; ++i)
      if (r.loss_mask[size_t(i)]) fail(where("loss_mask"), " is 1 inside the prompt (token ", i, ")");
    if (!j.contains("finish_reason") || !j["finish_reason"].is_string()) fail(where("finish_reason"), " must be a string");
    r.finish_reason = j["finish_reason"].get<std::string>();
    if (r.finish_reason != "stop" && r.finish_reason != "length")
      fail(where("finish_reason"), " must be \"stop\" or \"length\", got \"", r.finish_reason, "\"");
  } catch (const nlohmann::json::exception& e) {
    fail(path, ":", number, ": ", e.what());
  }
  return r;
}

uint64_t for_each_regen_record(
    std::string_view text, const std::string& path,
    const std::function<void(RegenRecord&& record, std::string_view line, int64_t number)>& on_record) {
  std::unordered_map<int64_t, int64_t> first_line;  // id -> the line it was first seen on
  size_t pos = 0;
  int64_t number = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) break;  // no newline: the write of this line never finished
    ++number;
    const std::string_view line = text.substr(pos, end - pos);
    if (!line.empty()) {
      RegenRecord r = parse_regen_line(line, path, number);
      const auto [it, fresh] = first_line.emplace(r.id, number);
      if (!fresh)
        fail(path, ":", number, ": id ", r.id, " appears twice (also on line ", it->second, ")");
      on_record(std::move(r), line, number);
    }
    pos = end + 1;
  }
  return pos;
}

RegenFile read_regen_file(const std::string& path, bool missing_ok) {
  RegenFile out;
  if (missing_ok && !std::filesystem::exists(path)) return out;
  const std::string text = read_text_file(path);
  out.good_bytes = for_each_regen_record(text, path, [&](RegenRecord&& r, std::string_view, int64_t) {
    out.records.push_back(std::move(r));
  });
  out.truncated_tail = out.good_bytes < text.size();
  out.crc32 = crc32_bytes(text.data(), size_t(out.good_bytes));
  return out;
}

}  // namespace dspark::datagen

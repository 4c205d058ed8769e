// dictd databases (dict-gcide, dict-freedict-*): an INDEX of "headword TAB offset TAB length"
// (dictd base64 numbers) and a DICT file, plain or dictzip (gzip-readable).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dspark::data {

struct DictdEntry {
  std::string headword;  // the first index headword of the article
  std::string body;      // the article text
  uint64_t offset = 0;
};

// One entry per distinct article, in file order. Errors name the file and line.
// `skip_meta` leaves out the "00-database-..." entries.
std::vector<DictdEntry> read_dictd(const std::string& index_path, const std::string& dict_path,
                                   bool skip_meta = true);

// dictd's base64 number encoding ("A" = 0, "BA" = 64); false if s holds another character.
bool decode_dictd_number(const std::string& s, uint64_t* out);
std::string encode_dictd_number(uint64_t v);

}  // namespace dspark::data

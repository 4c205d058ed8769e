// FreeDict bilingual dictionary articles (dict-freedict-XXX-YYY) parsed into translations.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dspark::data {

struct FreedictEntry {
  std::string headword;
  std::string pos;                                          // "fem, n, sg" (may be empty)
  std::vector<std::string> translations;                    // one per sense line, markup removed
  std::vector<std::string> notes;                           // "Note:" lines
  std::vector<std::pair<std::string, std::string>> examples;  // ("with good intent", "in guter Absicht")
};

// Parses one article; false when it has no translation.
bool parse_freedict_entry(std::string_view raw, FreedictEntry* out);

// "deu" -> "German"; empty for codes it does not know.
std::string language_name(const std::string& iso639_3);

}  // namespace dspark::data

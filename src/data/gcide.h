// GCIDE (dict-gcide) articles: markup stripped to plain text, headword and definition found.
#pragma once

#include <string>
#include <string_view>

namespace dspark::data {

struct GcideEntry {
  std::string headword;
  std::string text;        // the whole article as plain text, one paragraph or sense per line
  std::string definition;  // the senses (what "Define X" is answered with)
};

// Cleans one article: drops source tags ("[1913 Webster]"), pronunciation and hyphenation
// ("\Grav"i*ty\", "(k[a^]t)"), turns cross-reference braces into plain words and accent codes
// ("[\"o]", "[ae]") into characters, and joins wrapped lines. False for articles with no
// usable text. `index_headword` is used when the article's first line names none.
bool clean_gcide_entry(const std::string& index_headword, std::string_view raw, GcideEntry* out);

// Accent and symbol codes of the GCIDE text ("[a^]" -> "ă", "[root]" -> "√").
std::string gcide_accents(std::string_view s);

}  // namespace dspark::data

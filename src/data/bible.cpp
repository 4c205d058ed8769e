#include "data/bible.h"

#include <cstring>
#include <map>

#include "core/error.h"
#include "core/mmap_file.h"
#include "data/compress.h"
#include "data/text_util.h"

namespace dspark::data {

std::string decode_brs_data(std::string_view f, const std::string& what) {
  constexpr size_t kHeader = 84;  // magic (2), version (2), description (80)
  if (f.size() < kHeader + 8 || f.substr(0, 2) != "EC")
    fail(what, ": not a Bible Retrieval System data file (bad magic)");
  if (f.substr(2, 2) != "02") fail(what, ": unsupported BRS data file version '", f.substr(2, 2), "'");
  const auto be32 = [&](size_t at) {
    const auto* p = reinterpret_cast<const unsigned char*>(f.data() + at);
    return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
  };
  const uint32_t wsize = be32(kHeader), wnum = be32(kHeader + 4);
  if (wsize == 0 || wsize > (1u << 24) || wnum == 0 || wnum > 100000)
    fail(what, ": implausible window table (size ", wsize, ", count ", wnum, ")");
  const size_t table = kHeader + 8;
  if (f.size() < table + 4 * (size_t(wnum) + 1)) fail(what, ": truncated window table");
  std::string out;
  for (uint32_t w = 0; w < wnum; ++w) {
    const uint32_t b = be32(table + 4 * w), e = be32(table + 4 * (w + 1));
    if (b > e || e > f.size()) fail(what, ": window ", w, " lies outside the file");
    const std::string block = lzw_decompress(f.substr(b, e - b), what + " window " + std::to_string(w));
    if (w + 1 < wnum && block.size() != wsize)
      fail(what, ": window ", w, " decompressed to ", block.size(), " bytes, expected ", wsize);
    out += block;
  }
  return out;
}

std::string read_brs_data_file(const std::string& path) {
  MappedFile m(path);
  return decode_brs_data(std::string_view(reinterpret_cast<const char*>(m.data()), m.size()), path);
}

std::vector<BibleChapter> bible_chapters(std::string_view text) {
  static const std::map<std::string, std::string> kBooks = {
      {"Ge", "Genesis"}, {"Exo", "Exodus"}, {"Lev", "Leviticus"}, {"Num", "Numbers"}, {"Deu", "Deuteronomy"},
      {"Josh", "Joshua"}, {"Jdgs", "Judges"}, {"Ruth", "Ruth"}, {"1Sm", "1 Samuel"}, {"2Sm", "2 Samuel"},
      {"1Ki", "1 Kings"}, {"2Ki", "2 Kings"}, {"1Chr", "1 Chronicles"}, {"2Chr", "2 Chronicles"}, {"Ezra", "Ezra"},
      {"Neh", "Nehemiah"}, {"Est", "Esther"}, {"Job", "Job"}, {"Psa", "Psalms"}, {"Prv", "Proverbs"},
      {"Eccl", "Ecclesiastes"}, {"SSol", "Song of Solomon"}, {"Isa", "Isaiah"}, {"Jer", "Jeremiah"},
      {"Lam", "Lamentations"}, {"Eze", "Ezekiel"}, {"Dan", "Daniel"}, {"Hos", "Hosea"}, {"Joel", "Joel"},
      {"Amos", "Amos"}, {"Obad", "Obadiah"}, {"Jonah", "Jonah"}, {"Mic", "Micah"}, {"Nahum", "Nahum"},
      {"Hab", "Habakkuk"}, {"Zep", "Zephaniah"}, {"Hag", "Haggai"}, {"Zec", "Zechariah"}, {"Mal", "Malachi"},
      {"Mat", "Matthew"}, {"Mark", "Mark"}, {"Luke", "Luke"}, {"John", "John"}, {"Acts", "Acts"},
      {"Rom", "Romans"}, {"1Cor", "1 Corinthians"}, {"2Cor", "2 Corinthians"}, {"Gal", "Galatians"},
      {"Eph", "Ephesians"}, {"Phi", "Philippians"}, {"Col", "Colossians"}, {"1Th", "1 Thessalonians"},
      {"2Th", "2 Thessalonians"}, {"1Tim", "1 Timothy"}, {"2Tim", "2 Timothy"}, {"Titus", "Titus"},
      {"Phmn", "Philemon"}, {"Heb", "Hebrews"}, {"Jas", "James"}, {"1Pet", "1 Peter"}, {"2Pet", "2 Peter"},
      {"1Jn", "1 John"}, {"2Jn", "2 John"}, {"3Jn", "3 John"}, {"Jude", "Jude"}, {"Rev", "Revelation"},
  };
  std::vector<BibleChapter> out;
  for (const auto line : split_lines(text)) {
    // "<abbr><chapter>:<verse> <text>"; the abbreviation may start with a digit ("1Sm").
    size_t i = 0;
    if (i < line.size() && line[i] >= '1' && line[i] <= '3') ++i;
    while (i < line.size() && ((line[i] >= 'A' && line[i] <= 'Z') || (line[i] >= 'a' && line[i] <= 'z'))) ++i;
    const std::string abbr(line.substr(0, i));
    const auto book = kBooks.find(abbr);
    if (book == kBooks.end()) continue;
    size_t j = i;
    int chapter = 0, verse = 0;
    while (j < line.size() && line[j] >= '0' && line[j] <= '9') chapter = chapter * 10 + (line[j++] - '0');
    if (j == i || j >= line.size() || line[j] != ':') continue;
    const size_t v0 = ++j;
    while (j < line.size() && line[j] >= '0' && line[j] <= '9') verse = verse * 10 + (line[j++] - '0');
    if (j == v0 || j >= line.size() || line[j] != ' ') continue;
    const std::string_view verse_text = trim(line.substr(j + 1));
    if (out.empty() || out.back().book != book->second || out.back().chapter != chapter) {
      BibleChapter c;
      c.book = book->second;
      c.chapter = chapter;
      c.text = c.book + " " + std::to_string(chapter) + "\n\n";
      out.push_back(std::move(c));
    }
    out.back().text += std::to_string(verse) + " " + std::string(verse_text) + "\n";
  }
  for (auto& c : out)
    if (!c.text.empty() && c.text.back() == '\n') c.text.pop_back();
  return out;
}

}  // namespace dspark::data

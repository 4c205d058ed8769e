// The King James Bible of bible-kjv-text (/usr/lib/bible.data): the Bible Retrieval System's
// windowed LZW file, and its text split into chapters.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dspark::data {

// Decompresses a BRS data file ("EC02" header, big-endian window table, one LZW block per
// window). Errors name the path.
std::string read_brs_data_file(const std::string& path);
std::string decode_brs_data(std::string_view file, const std::string& what);

struct BibleChapter {
  std::string book;     // "Genesis"
  int chapter = 0;
  std::string text;     // "Genesis 1\n\n1 In the beginning ...\n2 ..."
};
// Lines "Ge1:1 In the beginning ..." grouped into chapters with the books' full names. Lines
// that are not verses are skipped.
std::vector<BibleChapter> bible_chapters(std::string_view text);

}  // namespace dspark::data

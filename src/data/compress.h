// Decompression for the corpus sources: gzip / dictzip (zlib) and Unix compress (LZW) windows of
// the KJV data file. (Checksums: core/crc32.h.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dspark::data {

// Inflates a whole gzip file (every member; dictzip files are gzip files with an extra field).
// Errors name the path.
std::string read_gzip_file(const std::string& path);
// Inflates gzip data held in memory; `what` names it in errors.
std::string gunzip(std::string_view data, const std::string& what);
// Writes `text` as a gzip file (used by tests to build synthetic sources).
void write_gzip_file(const std::string& path, std::string_view text);

// One block of Unix `compress` (LZW, up to 16-bit codes, block mode, no 3-byte header), the way
// the Bible Retrieval System stores each window. Errors name `what`.
std::string lzw_decompress(std::string_view data, const std::string& what, int max_bits = 16);

}  // namespace dspark::data

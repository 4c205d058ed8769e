#include "core/crc32.h"

#include <zlib.h>

#include <cstdio>

#include "core/error.h"
#include "core/mmap_file.h"

namespace dspark {

uint32_t crc32_bytes(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (n > 0) {
    const uInt chunk = n > (1u << 30) ? (1u << 30) : uInt(n);
    c = ::crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return uint32_t(c);
}

uint32_t crc32_file(const std::string& path) {
  MappedFile f(path);
  return crc32_bytes(f.data(), f.size());
}

std::string crc32_hex(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

std::optional<uint32_t> crc32_from_hex(std::string_view s) {
  if (s.size() != 8 || s.find_first_not_of("0123456789abcdef") != std::string_view::npos)
    return std::nullopt;
  uint32_t v = 0;
  for (const char c : s) v = (v << 4) | uint32_t(c <= '9' ? c - '0' : c - 'a' + 10);
  return v;
}

uint32_t parse_crc32_hex(const std::string& s, const std::string& where) {
  const std::optional<uint32_t> crc = crc32_from_hex(s);
  if (!crc) fail(where, ": expected a CRC32 as 8 lowercase hex digits, got \"", s, "\"");
  return *crc;
}

}  // namespace dspark

#include "core/crc32.h"

#include <zlib.h>

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

}  // namespace dspark

// CRC32 (zlib's polynomial) of memory and files, for manifests and checkpoints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dspark {

uint32_t crc32_bytes(const void* data, size_t n, uint32_t crc = 0);
uint32_t crc32_file(const std::string& path);  // throws Error naming the path

}  // namespace dspark

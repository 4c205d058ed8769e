// CRC32 (zlib's polynomial) of memory and files, for manifests and checkpoints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dspark {

uint32_t crc32_bytes(const void* data, size_t n, uint32_t crc = 0);
uint32_t crc32_file(const std::string& path);  // throws Error naming the path
// "%08x": 8 lower-case hex digits, the spelling of every manifest's crc32 field.
std::string crc32_hex(uint32_t crc);
// Parses crc32_hex's output; throws Error naming `where` otherwise.
uint32_t parse_crc32_hex(const std::string& s, const std::string& where);
// crc32_hex's output parsed, or nullopt for anything else (for callers with their own message).
std::optional<uint32_t> crc32_from_hex(std::string_view s);

}  // namespace dspark

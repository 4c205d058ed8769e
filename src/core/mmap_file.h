// MappedFile: a read-only memory map of a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace dspark {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws Error naming the path
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

std::string read_text_file(const std::string& path);  // throws Error naming the path
void write_file_atomic(const std::string& path, const void* data, size_t n);
// The pieces one after another, written as one file: to path.tmp, synced, then renamed to path
// (no copy of them is made, so a file as large as memory allows can be written).
void write_file_atomic(const std::string& path, std::span<const std::span<const uint8_t>> pieces);

}  // namespace dspark

#include "core/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "core/buffer.h"
#include "core/error.h"

namespace dspark {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail(path, ": is a directory, expected a file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail(path, ": cannot map: ", std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  std::swap(path_, o.path_);
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open: ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(path, ": read error");
  return ss.str();
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  const std::span<const uint8_t> one(static_cast<const uint8_t*>(data), n);
  write_file_atomic(path, std::span<const std::span<const uint8_t>>(&one, 1));
}

void write_file_atomic(const std::string& path, std::span<const std::span<const uint8_t>> pieces) {
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(tmp, ": cannot create: ", std::strerror(errno));
  bool ok = true;
  for (const std::span<const uint8_t>& p : pieces)
    ok = ok && (p.empty() || std::fwrite(p.data(), 1, p.size(), f) == p.size());
  ok = (std::fflush(f) == 0) && ok;
  ok = (::fsync(::fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) fail(tmp, ": write failed: ", std::strerror(errno));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(path, ": rename failed: ", std::strerror(errno));
}

HugeBuffer::HugeBuffer(size_t bytes) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  if (p == MAP_FAILED) fail("cannot reserve ", bytes, " bytes of memory: ", std::strerror(errno));
  ::madvise(p, bytes, MADV_HUGEPAGE);
  mem_ = std::unique_ptr<void, Unmap>(p, Unmap{bytes});
}

void HugeBuffer::Unmap::operator()(void* p) const { ::munmap(p, bytes); }

}  // namespace dspark

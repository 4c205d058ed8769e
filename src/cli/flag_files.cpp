#include "cli/flag_files.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace dspark {

void check_writable(const std::string& path, const std::string& flag) {
  const bool existed = std::filesystem::exists(path);
  if (existed && std::filesystem::is_directory(path))
    fail("flag --", flag, ": ", path, " is a directory");
  {
    std::ofstream f(path, std::ios::app);
    if (!f) fail("flag --", flag, ": cannot write ", path);
  }
  if (!existed) std::filesystem::remove(path);
}

void write_file(const std::string& path, const std::string& text, const std::string& flag) {
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("flag --", flag, ": cannot write ", path);
  f << text;
  if (!f) fail("flag --", flag, ": write to ", path, " failed");
}

}  // namespace dspark

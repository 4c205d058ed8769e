#include "data/compress.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/mmap_file.h"

namespace dspark::data {

std::string gunzip(std::string_view data, const std::string& what) {
  std::string out;
  size_t pos = 0;
  // A gzip file may hold several members back to back; inflate each.
  while (pos < data.size()) {
    z_stream zs{};
    if (inflateInit2(&zs, 15 + 16) != Z_OK) fail(what, ": cannot initialise zlib");
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + pos));
    zs.avail_in = static_cast<uInt>(std::min<size_t>(data.size() - pos, 1u << 30));
    char buf[1 << 16];
    int rc;
    do {
      zs.next_out = reinterpret_cast<Bytef*>(buf);
      zs.avail_out = sizeof buf;
      rc = inflate(&zs, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) {
        const std::string msg = zs.msg ? zs.msg : "data error";
        inflateEnd(&zs);
        fail(what, ": not a valid gzip/dictzip file (", msg, ")");
      }
      out.append(buf, sizeof buf - zs.avail_out);
      if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {
        inflateEnd(&zs);
        fail(what, ": truncated gzip data");
      }
    } while (rc != Z_STREAM_END);
    pos += zs.total_in;
    inflateEnd(&zs);
    // Trailing zero padding after the last member is tolerated (as gzip does).
    while (pos < data.size() && data[pos] == 0) ++pos;
  }
  return out;
}

std::string read_gzip_file(const std::string& path) {
  MappedFile f(path);
  return gunzip(std::string_view(reinterpret_cast<const char*>(f.data()), f.size()), path);
}

void write_gzip_file(const std::string& path, std::string_view text) {
  gzFile g = gzopen(path.c_str(), "wb9");
  if (!g) fail(path, ": cannot create: ", std::strerror(errno));
  if (!text.empty() && gzwrite(g, text.data(), static_cast<unsigned>(text.size())) != int(text.size())) {
    gzclose(g);
    fail(path, ": write failed");
  }
  if (gzclose(g) != Z_OK) fail(path, ": write failed");
}

std::string lzw_decompress(std::string_view in, const std::string& what, int max_bits) {
  // Mirrors compress(1)'s decoder: codes are read in groups of n_bits bytes (8 codes); when the
  // code width grows or the table is cleared, the rest of the current group is skipped.
  constexpr int kInitBits = 9, kClear = 256, kFirst = 257;
  if (max_bits < kInitBits || max_bits > 16) fail(what, ": unsupported LZW code width ", max_bits);
  const int64_t maxmaxcode = int64_t(1) << max_bits;
  std::vector<uint16_t> prefix(size_t(maxmaxcode), 0);
  std::vector<uint8_t> suffix(size_t(maxmaxcode), 0);
  for (int c = 0; c < 256; ++c) suffix[size_t(c)] = uint8_t(c);
  int n_bits = kInitBits;
  int64_t maxcode = (int64_t(1) << n_bits) - 1;
  int64_t free_ent = kFirst;
  bool clear_flg = false;
  size_t inpos = 0;
  int64_t offset = 0, size = 0;  // in bits, within `group`
  uint8_t group[16] = {};

  const auto getcode = [&]() -> int64_t {
    if (clear_flg || offset >= size || free_ent > maxcode) {
      if (free_ent > maxcode) {
        ++n_bits;
        maxcode = n_bits == max_bits ? maxmaxcode : (int64_t(1) << n_bits) - 1;
      }
      if (clear_flg) {
        n_bits = kInitBits;
        maxcode = (int64_t(1) << n_bits) - 1;
        clear_flg = false;
      }
      int64_t got = std::min<int64_t>(n_bits, int64_t(in.size() - inpos));
      if (got <= 0) {
        size = 0;
        return -1;
      }
      std::memset(group, 0, sizeof group);
      std::memcpy(group, in.data() + inpos, size_t(got));
      inpos += size_t(got);
      offset = 0;
      size = (got << 3) - (n_bits - 1);
    }
    int64_t code = 0;
    for (int k = 0; k < n_bits; ++k) {
      const int64_t bit = offset + k;
      code |= int64_t((group[bit >> 3] >> (bit & 7)) & 1) << k;
    }
    offset += n_bits;
    return code;
  };

  std::string out;
  int64_t oldcode = getcode();
  if (oldcode < 0) return out;
  if (oldcode > 255) fail(what, ": corrupt LZW data (first code ", oldcode, ")");
  int finchar = int(oldcode);
  out += char(finchar);
  std::string stack;
  int64_t code;
  while ((code = getcode()) >= 0) {
    if (code == kClear) {
      clear_flg = true;
      free_ent = kFirst - 1;
      if ((code = getcode()) < 0) break;
    }
    const int64_t incode = code;
    stack.clear();
    if (code >= free_ent) {
      if (code > free_ent) fail(what, ": corrupt LZW data (code ", code, " beyond table ", free_ent, ")");
      stack += char(finchar);
      code = oldcode;
    }
    while (code >= 256) {
      stack += char(suffix[size_t(code)]);
      code = prefix[size_t(code)];
    }
    finchar = suffix[size_t(code)];
    stack += char(finchar);
    out.append(stack.rbegin(), stack.rend());
    if (free_ent < maxmaxcode) {
      prefix[size_t(free_ent)] = uint16_t(oldcode);
      suffix[size_t(free_ent)] = uint8_t(finchar);
      ++free_ent;
    }
    oldcode = incode;
  }
  return out;
}

}  // namespace dspark::data

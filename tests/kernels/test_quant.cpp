// Dequantization of every ggml type dspark reads against an independent float64 numpy
// implementation of the block formats (tests/reference/gguf_reference.py writes both).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/gguf.h"
#include "core/mmap_file.h"
#include "kernels/quant.h"

namespace dspark {
namespace {

std::string reference_dir() {
  const char* env = std::getenv("DSPARK_GGUF_REFERENCE_DIR");
  if (!env) throw std::runtime_error("DSPARK_GGUF_REFERENCE_DIR is not set (run through ctest)");
  return std::string(env) + "/dequant";
}

TEST(Dequantize, EveryTypeMatchesTheFloat64Reference) {
  const std::string dir = reference_dir();
  const GgufFile f(dir + "/blocks.gguf");
  const auto manifest = nlohmann::json::parse(read_text_file(dir + "/manifest.json"));
  ASSERT_EQ(manifest.size(), 8u);
  for (const auto& [name, m] : manifest.items()) {
    const GgufTensor* t = f.tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_STREQ(ggml_type_name(t->type), m["type"].get<std::string>().c_str());
    const int64_t rows = m["rows"], cols = m["cols"];
    std::vector<double> want(size_t(rows * cols));
    std::ifstream(dir + "/" + m["values"].get<std::string>(), std::ios::binary)
        .read(reinterpret_cast<char*>(want.data()), std::streamsize(want.size() * 8));
    double scale = 0, worst = 0;
    std::vector<float> got(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(t->type, t->data + size_t(r) * ggml_row_bytes(t->type, cols), got.data(), cols);
      for (int64_t c = 0; c < cols; ++c) {
        const double w = want[size_t(r * cols + c)];
        scale = std::max(scale, std::abs(w));
        worst = std::max(worst, std::abs(double(got[size_t(c)]) - w));
      }
    }
    ASSERT_GT(scale, 0.01) << name << ": the reference values are all about zero";
    EXPECT_LE(worst, 1e-6 * scale) << name << ": max error " << worst << " at scale " << scale;
  }
}

TEST(Dequantize, RefusesWhatItCannotRead) {
  float out[256];
  const std::string zeros(256, '\0');
  EXPECT_THROW(dequantize_row(GgmlType::Q2_K, zeros.data(), out, 256), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q8_0, zeros.data(), out, 31), Error);
}

}  // namespace
}  // namespace dspark

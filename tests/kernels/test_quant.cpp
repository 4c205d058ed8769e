// Dequantization of every ggml type dspark reads against an independent float64 numpy
// implementation of the block formats, and quantization (Q8_0, Q4_0, Q5_0, Q4_K) byte for byte
// against a float32 numpy implementation of llama.cpp's reference rounding
// (tests/reference/gguf_reference.py writes both).
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

TEST(Quantize, BytesEqualTheReferenceRounding) {
  const char* env = std::getenv("DSPARK_GGUF_REFERENCE_DIR");
  ASSERT_NE(env, nullptr) << "DSPARK_GGUF_REFERENCE_DIR is not set (run through ctest)";
  const std::string dir = std::string(env) + "/quantize";
  const auto manifest = nlohmann::json::parse(read_text_file(dir + "/manifest.json"));
  const int rows = manifest["rows"], cols = manifest["cols"];
  std::vector<float> x(size_t(rows) * size_t(cols));
  std::ifstream(dir + "/input.f32", std::ios::binary).read(reinterpret_cast<char*>(x.data()), std::streamsize(x.size() * 4));
  ASSERT_EQ(manifest["types"].size(), 5u);
  for (const auto& name : manifest["types"]) {
    const GgmlType t = *ggml_type_from_name(name.get<std::string>());
    const size_t row_bytes = ggml_row_bytes(t, cols);
    std::string want(row_bytes * size_t(rows), '\0');
    std::ifstream(dir + "/" + name.get<std::string>() + ".bin", std::ios::binary).read(want.data(), std::streamsize(want.size()));
    for (int r = 0; r < rows; ++r) {
      std::string got(row_bytes, '\0');
      quantize_row(t, x.data() + size_t(r) * size_t(cols), got.data(), cols);
      EXPECT_EQ(got, want.substr(size_t(r) * row_bytes, row_bytes)) << name << " row " << r;
      // And it round-trips: every weight dequantizes to within its block's step.
      std::vector<float> back(static_cast<size_t>(cols));
      dequantize_row(t, got.data(), back.data(), cols);
      float amax = 0, worst = 0;
      for (int c = 0; c < cols; ++c) {
        amax = std::max(amax, std::abs(x[size_t(r) * size_t(cols) + size_t(c)]));
        worst = std::max(worst, std::abs(back[size_t(c)] - x[size_t(r) * size_t(cols) + size_t(c)]));
      }
      EXPECT_LE(worst, amax * (t == GgmlType::Q8_0 ? 0.01f : 0.25f)) << name << " row " << r;
    }
  }
}

TEST(Dequantize, RefusesWhatItCannotRead) {
  float out[256];
  const std::string zeros(256, '\0');
  EXPECT_THROW(dequantize_row(GgmlType::Q2_K, zeros.data(), out, 256), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q8_0, zeros.data(), out, 31), Error);
  char blocks[512];
  EXPECT_THROW(quantize_row(GgmlType::Q2_K, out, blocks, 256), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q6_K, out, blocks, 128), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q4_K, out, blocks, 128), Error);
}

}  // namespace
}  // namespace dspark

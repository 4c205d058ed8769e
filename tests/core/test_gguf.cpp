// The GGUF reader (src/core/gguf.h): valid files read back, and every kind of malformed file is
// refused with an Error naming the key or tensor at fault.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/gguf.h"
#include "gguf_builder.h"
#include "../error_of.h"

namespace dspark {
namespace {

using testing::error_of;
using testing::GgufBuilder;

constexpr uint32_t kF32 = 0, kQ8_0 = 8, kQ2_K = 10, kQ4_K = 12;

GgufContents parse(const std::string& b) {
  return parse_gguf(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "test.gguf");
}

std::string parse_error(const std::string& b) {
  return error_of([&] { parse(b); });
}

std::string floats(std::initializer_list<float> v) {
  std::string s;
  for (float x : v) GgufBuilder::put<float>(s, x);
  return s;
}

GgufBuilder valid() {
  GgufBuilder g;
  g.kv_str("general.architecture", "qwen3")
      .kv_u32("qwen3.block_count", 2)
      .kv_f32("qwen3.rope.freq_base", 1e6f)
      .kv_bool("tokenizer.ggml.add_bos_token", true)
      .kv_strs("tokenizer.ggml.tokens", {"a", "b", "<|im_end|>"})
      .kv_i32s("tokenizer.ggml.token_type", {1, 1, 3});
  g.tensor("norm.weight", kF32, {4}, floats({1, 2, 3, 4}));
  std::string q8(34, '\0');
  q8[2] = char(-3);
  g.tensor("blk.0.attn_q.weight", kQ8_0, {32, 1}, q8);
  return g;
}

TEST(Gguf, ValidFileReadsBack) {
  const GgufContents c = parse(valid().build());
  EXPECT_EQ(c.version, 3u);
  EXPECT_EQ(c.metadata.at("general.architecture").str, "qwen3");
  EXPECT_EQ(c.metadata.at("qwen3.block_count").integer, 2);
  EXPECT_FLOAT_EQ(float(c.metadata.at("qwen3.rope.freq_base").number), 1e6f);
  EXPECT_EQ(c.metadata.at("tokenizer.ggml.add_bos_token").integer, 1);
  EXPECT_EQ(c.metadata.at("tokenizer.ggml.tokens").strings, (std::vector<std::string>{"a", "b", "<|im_end|>"}));
  EXPECT_EQ(c.metadata.at("tokenizer.ggml.token_type").integers, (std::vector<int64_t>{1, 1, 3}));
  ASSERT_EQ(c.tensors.size(), 2u);
  EXPECT_EQ(c.tensors[0].name, "norm.weight");
  float x[4];
  std::memcpy(x, c.tensors[0].data, 16);
  EXPECT_EQ(x[3], 4.f);
  EXPECT_EQ(c.tensors[1].type, GgmlType::Q8_0);
  EXPECT_EQ(c.tensors[1].nbytes, 34u);
  EXPECT_EQ(c.tensors[1].shape_str(), "[1, 32]");
  EXPECT_EQ(int8_t(c.tensors[1].data[2]), -3);
}

TEST(Gguf, FileTypedReadsNameTheKey) {
  const auto dir = std::filesystem::temp_directory_path() / ("dspark_gguf_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "m.gguf").string();
  std::ofstream(path, std::ios::binary) << valid().build();
  const GgufFile f(path);
  EXPECT_EQ(f.arch_key("block_count"), "qwen3.block_count");
  EXPECT_EQ(f.integer("qwen3.block_count"), 2);
  EXPECT_NE(f.tensor("norm.weight"), nullptr);
  EXPECT_NE(error_of([&] { f.integer("qwen3.context_length"); }).find("missing metadata key 'qwen3.context_length'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.integer("general.architecture"); }).find("'general.architecture' is string, not an integer"),
            std::string::npos);
  EXPECT_EQ(find_gguf(dir.string()), path);  // a directory with one .gguf and no config.json
  std::ofstream((dir / "n.gguf").string(), std::ios::binary) << valid().build();
  EXPECT_NE(error_of([&] { find_gguf(dir.string()); }).find("holds 2 .gguf files"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Gguf, EveryTruncationIsRefused) {
  const std::string b = valid().build();
  for (size_t n = 0; n < b.size(); ++n) {
    const std::string e = parse_error(b.substr(0, n));
    EXPECT_FALSE(e.empty()) << "a file cut at " << n << " of " << b.size() << " bytes was accepted";
  }
}

TEST(Gguf, BadMagicAndVersion) {
  std::string b = valid().build();
  b[0] = 'X';
  EXPECT_NE(parse_error(b).find("bad magic"), std::string::npos);
  GgufBuilder g = valid();
  g.version = 1;
  EXPECT_NE(parse_error(g.build()).find("GGUF version 1"), std::string::npos);
  g.version = 0x03000000u;
  EXPECT_NE(parse_error(g.build()).find("big-endian"), std::string::npos);
}

TEST(Gguf, TensorTypesAreChecked) {
  GgufBuilder g;
  g.tensor("blk.3.ffn_up.weight", 77, {32}, std::string(128, '\0'));
  EXPECT_NE(parse_error(g.build()).find("tensor 'blk.3.ffn_up.weight' has unknown ggml type 77"), std::string::npos);
  GgufBuilder h;
  h.tensor("blk.0.ffn_down.weight", kQ2_K, {256}, std::string(84, '\0'));
  const std::string e = parse_error(h.build());
  EXPECT_NE(e.find("'blk.0.ffn_down.weight' is Q2_K"), std::string::npos) << e;
  GgufBuilder k;
  k.tensor("output.weight", kQ4_K, {255}, std::string(144, '\0'));
  EXPECT_NE(parse_error(k.build()).find("'output.weight' (Q4_K) has rows of 255 elements"), std::string::npos);
}

TEST(Gguf, TensorPlacementIsChecked) {
  GgufBuilder g;
  g.tensor("a", kF32, {8}, std::string(32, '\0'));
  std::string b = g.build();
  b.resize(b.size() - 1);
  EXPECT_NE(parse_error(b).find("tensor 'a' (32 bytes at data offset 0) runs past the end"), std::string::npos);
  GgufBuilder m;
  m.tensor("b", kF32, {8}, std::string(32, '\0'), 4);
  EXPECT_NE(parse_error(m.build()).find("tensor 'b' is misaligned (offset 4, alignment 32)"), std::string::npos);
  GgufBuilder o;
  o.tensor("c", kF32, {16}, std::string(64, '\0'), 0).tensor("d", kF32, {8}, std::string(32, '\0'), 32);
  EXPECT_NE(parse_error(o.build()).find("tensors 'c' and 'd' overlap"), std::string::npos);
  GgufBuilder d5;
  d5.tensor("e", kF32, {1, 1, 1, 1, 1}, std::string(4, '\0'));
  EXPECT_NE(parse_error(d5.build()).find("tensor 'e' has 5 dimensions"), std::string::npos);
  GgufBuilder huge;
  huge.tensor("f", kF32, {uint64_t(1) << 40, uint64_t(1) << 40}, std::string(4, '\0'));
  EXPECT_NE(parse_error(huge.build()).find("'f'"), std::string::npos);
}

TEST(Gguf, AbsurdCountsAndDuplicatesAreRefused) {
  GgufBuilder g = valid();
  g.tensor_count_override = int64_t(1) << 40;
  EXPECT_NE(parse_error(g.build()).find("absurd tensor count"), std::string::npos);
  GgufBuilder k = valid();
  k.kv_count_override = int64_t(1) << 40;
  EXPECT_NE(parse_error(k.build()).find("absurd metadata key count"), std::string::npos);
  GgufBuilder a;
  std::string arr;
  GgufBuilder::put<uint32_t>(arr, 8);
  GgufBuilder::put<uint64_t>(arr, uint64_t(1) << 50);
  a.kv_raw("tokenizer.ggml.merges", 9, arr);
  EXPECT_NE(parse_error(a.build()).find("key 'tokenizer.ggml.merges': an array of"), std::string::npos);
  GgufBuilder d;
  d.kv_u32("x.y", 1).kv_u32("x.y", 2);
  EXPECT_NE(parse_error(d.build()).find("duplicate metadata key 'x.y'"), std::string::npos);
  GgufBuilder t;
  t.tensor("w", kF32, {8}, std::string(32, '\0')).tensor("w", kF32, {8}, std::string(32, '\0'));
  EXPECT_NE(parse_error(t.build()).find("duplicate tensor 'w'"), std::string::npos);
  GgufBuilder al;
  al.kv_u32("general.alignment", 3);
  EXPECT_NE(parse_error(al.build()).find("'general.alignment' must be a power of two"), std::string::npos);
  GgufBuilder vt;
  vt.kv_raw("general.name", 99, "");
  EXPECT_NE(parse_error(vt.build()).find("key 'general.name' has unknown value type 99"), std::string::npos);
}

TEST(Gguf, TypeNames) {
  EXPECT_EQ(ggml_type_from_name("q4_k"), GgmlType::Q4_K);
  EXPECT_EQ(ggml_type_from_name("BF16"), GgmlType::BF16);
  EXPECT_FALSE(ggml_type_from_name("q3_x"));
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q6_K, 512), 420u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_0, 64), 36u);
}

}  // namespace
}  // namespace dspark

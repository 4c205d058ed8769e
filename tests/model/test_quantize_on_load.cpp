// --quantization on load (LoadOptions::quantization): the matrices a model holds are exactly the
// dequantized blocks of llama.cpp's reference rounding, as an independent numpy implementation
// writes them (tests/reference/gguf_reference.py: DIR/quantize/).
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/gguf.h"
#include "kernels/quant.h"
#include "model/forward.h"
#include "model/model.h"

namespace dspark {
namespace {

std::string reference_dir() {
  const char* env = std::getenv("DSPARK_GGUF_REFERENCE_DIR");
  if (!env) throw std::runtime_error("DSPARK_GGUF_REFERENCE_DIR is not set (run through ctest)");
  return env;
}

std::vector<float> logits(const Model& m, const std::vector<int32_t>& prompt) {
  const ModelConfig& c = m.config();
  KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, m.dtype(), 256);
  Forward fwd(m, kv);
  const int seq = kv.create_sequence();
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int(i), seq, true);
  const ForwardOutput& out = fwd.run(b, {});
  return std::vector<float>(out.logits, out.logits + size_t(out.n_out) * out.vocab);
}

TEST(QuantizeOnLoad, Q8_0EqualsTheReferenceQuantizedFile) {
  const std::string dir = reference_dir();
  auto quantized = Model::load(dir + "/qwen3_f32", LoadOptions(DType::F32, GgmlType::Q8_0));
  auto reference = Model::load(dir + "/quantize/qwen3_q8_0.gguf", LoadOptions(DType::F32));
  auto plain = Model::load(dir + "/qwen3_f32", LoadOptions(DType::F32));
  EXPECT_EQ(quantized->quantized_types().size(), 16u);  // the embedding, lm_head, 2 layers x 7 matrices
  for (const auto& [name, t] : quantized->quantized_types()) EXPECT_EQ(t, GgmlType::Q8_0) << name;
  const std::vector<int32_t> prompt = {5, 17, 42, 99, 123, 7, 250, 3};
  const auto a = logits(*quantized, prompt), b = logits(*reference, prompt), c = logits(*plain, prompt);
  EXPECT_EQ(a, b) << "the model quantized on load differs from the reference's quantized file";
  EXPECT_NE(a, c) << "quantization changed nothing";
}

TEST(QuantizeOnLoad, Q4_KMatrixEqualsTheReferenceBlocks) {
  const std::string dir = reference_dir();
  auto m = Model::load(dir + "/qwen3_f32", LoadOptions(DType::F32, GgmlType::Q4_K));
  const GgufFile f(dir + "/quantize/qwen3_attn_k_q4_k.gguf");
  const GgufTensor* t = f.tensor("blk.0.attn_k.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, GgmlType::Q4_K);
  const ModelConfig& c = m->config();
  ASSERT_EQ(t->ne[0], c.hidden_size);
  std::vector<float> row(static_cast<size_t>(c.hidden_size));
  int64_t mismatches = 0;
  for (int64_t r = 0; r < t->rows(); ++r) {
    dequantize_row(t->type, t->data + size_t(r) * ggml_row_bytes(t->type, t->ne[0]), row.data(), t->ne[0]);
    for (int64_t k = 0; k < t->ne[0]; ++k)  // k_proj's rows follow q_proj's in the stacked qkv matrix
      mismatches += weight_at(m->layer(0).qkv, c.q_dim() + r, k) != row[size_t(k)];
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(m->quantized_types().at("model.layers.0.self_attn.k_proj.weight"), GgmlType::Q4_K);
}

}  // namespace
}  // namespace dspark

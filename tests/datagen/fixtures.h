// Shared pieces of the datagen tests: a tiny ChatML tokenizer, tiny random Qwen3 targets whose
// lm_head makes <|im_end|> likely (so responses do stop), and prompt sets.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../data/test_util.h"
#include "core/dtype.h"
#include "datagen/prompts.h"
#include "model/model.h"
#include "model/weight_source.h"
#include "tokenizer/tokenizer.h"

namespace dspark::testing {

constexpr int32_t kEndOfText = 300, kImStart = 301, kImEnd = 302;  // tiny_tokenizer_json(300)

inline std::unique_ptr<Tokenizer> chat_tokenizer(const TempDir& dir) {
  return Tokenizer::from_file(dir.write("tokenizer.json", tiny_tokenizer_json(300)));
}

// random_source, except that lm_head's row of `token` is `alpha` everywhere: its logit is alpha
// times the sum of the final-normed hidden state, large and positive at many positions.
class BiasedSource : public WeightSource {
 public:
  BiasedSource(uint64_t seed, int32_t token, float alpha) : inner_(random_source(seed)), token_(token), alpha_(alpha) {}
  bool has(const std::string& name) const override { return inner_->has(name); }
  void read(const std::string& name, const std::vector<int64_t>& shape, DType dst_dtype, void* dst,
            int64_t dst_ld) const override {
    inner_->read(name, shape, dst_dtype, dst, dst_ld);
    if (name != "lm_head.weight") return;
    for (int64_t k = 0; k < shape[1]; ++k) {
      const int64_t at = int64_t(token_) * dst_ld + k;
      if (dst_dtype == DType::F32) static_cast<float*>(dst)[at] = alpha_;
      else static_cast<uint16_t*>(dst)[at] = f32_to_bf16(alpha_);
    }
  }
  std::vector<std::string> names() const override { return inner_->names(); }
  std::string describe() const override { return "biased " + inner_->describe(); }

 private:
  std::unique_ptr<WeightSource> inner_;
  int32_t token_;
  float alpha_;
};

// tiny-qwen3 with 3 layers, untied lm_head, no eos of its own.
inline ModelConfig tiny_config() {
  ModelConfig c = shape_config("tiny-qwen3");
  c.num_layers = 3;
  c.tie_word_embeddings = false;
  c.bos_token_id = -1;
  c.eos_token_ids = {};
  return c;
}

inline std::unique_ptr<Model> tiny_model(DType dtype = DType::F32, uint64_t seed = 7, float alpha = 0.25f) {
  return Model::build(tiny_config(), BiasedSource(seed, kImEnd, alpha), LoadOptions{dtype});
}

inline std::vector<datagen::RegenPrompt> some_prompts(int n) {
  static const char* kTexts[] = {"What is the capital of France?", "Add 17 and 25.", "Write a haiku about the sea.",
                                 "Translate 'good morning' to German.", "def add(a, b):", "Explain rain in one line.",
                                 "List three prime numbers.", "Who wrote Hamlet?", "the the the", "Say hi."};
  std::vector<datagen::RegenPrompt> out;
  for (int i = 0; i < n; ++i) {
    datagen::RegenPrompt p;
    p.id = i;
    p.turns.push_back(std::string(kTexts[i % 10]) + (i >= 10 ? " (" + std::to_string(i) + ")" : ""));
    out.push_back(p);
  }
  return out;
}

}  // namespace dspark::testing

// DSpark (DeepSeek, 2026): the DFlash-style backbone proposes a block from [anchor, MASK...]
// in one pass (the anchor slot is the first prediction), then a low-rank Markov head samples
// the block left to right, z_k = U_k + W2 W1[x_{k-1}], and a confidence head estimates each
// token's conditional chance of acceptance, c_k = sigmoid(w . [h_k ; W1[x_{k-1}]] + b).
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "spec_decode/dflash_backbone.h"
#include "spec_decode/drafter.h"
#include "spec_decode/drafters.h"

namespace dspark {

namespace {

float sigmoid(float x) {
  return 1.f / (1.f + std::exp(-x));
}

class DsparkDrafter : public DflashBackboneDrafter {
 public:
  DsparkDrafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src, DType dtype,
                std::vector<int32_t> to_target)
      : DflashBackboneDrafter(cfg, target, src, dtype, head_bytes(cfg, target, dtype),
                              std::move(to_target)) {
    const int64_t V = target.config().vocab_size, H = bb_.hidden(), r = cfg.markov_rank;
    WeightArena& a = bb_.arena();
    if (r > 0) {
      // W1 is read by the previous token's target id; W2 adds a bias to each logit of the head, so
      // it has the head's rows (the draft vocabulary's copied at load when the full head is kept).
      w1_ = a.matrix(src, "markov_head.markov_w1.weight", V, r);
      w2_ = a.matrix(src, "markov_head.markov_w2.weight",
                     bb_.has_full_head() ? V : cfg.draft_vocab_size, r);
      a.pack(w2_);  // W2 is only multiplied (one row per drafted token); W1 is read by row
      if (bb_.has_full_head() && bb_.has_draft_vocab()) {
        std::vector<int32_t> rows(size_t(cfg.draft_vocab_size));
        for (int i = 0; i < cfg.draft_vocab_size; ++i) rows[size_t(i)] = bb_.to_target(true, i);
        w2_draft_ = a.row_copy(w2_, rows);
      } else if (!bb_.has_full_head()) {
        w2_draft_ = w2_;
      }
      if (cfg.int8_weights) {
        const bool shared = w2_draft_.data == w2_.data;  // the head holds only the draft vocabulary
        quantize_int8_if_paired(w2_);
        if (shared)
          w2_draft_ = w2_;
        else
          quantize_int8_if_paired(w2_draft_);
      }
      if (cfg.markov_head_type == "gated") {
        gate_ = a.matrix(src, "markov_head.gate_proj.weight", r, H + r);
        a.pack(gate_);
        gate_bias_ = a.vector(src, "markov_head.gate_proj.bias", r);
      } else if (cfg.markov_head_type == "rnn") {
        joint_ = a.matrix(src, "markov_head.joint_proj.weight", 3 * r, 2 * r + H);
        a.pack(joint_);
        joint_bias_ = a.vector(src, "markov_head.joint_proj.bias", 3 * r);
      }
    }
    if (cfg.confidence_head) {
      const int64_t in = H + (cfg.confidence_with_markov ? r : 0);
      conf_w_ = a.f32(src, "confidence_head.proj.weight", {1, in});
      conf_b_ = *a.f32(src, "confidence_head.proj.bias", {1});
    }
  }

  static size_t head_bytes(const DrafterConfig& cfg, const Model& target, DType dtype) {
    const int64_t V = target.config().vocab_size, H = target.config().hidden_size,
                  r = cfg.markov_rank;
    const int64_t Vd = cfg.draft_vocab_size;
    if (r == 0) return 0;
    size_t b = WeightArena::matrix_bytes(dtype, V, r);  // W1
    if (Vd > 0 && cfg.keeps_full_head)
      b += WeightArena::matrix_bytes(dtype, V, r) + WeightArena::matrix_bytes(dtype, Vd, r);
    else
      b += WeightArena::matrix_bytes(dtype, Vd > 0 ? Vd : V, r);
    if (cfg.markov_head_type == "gated") b += WeightArena::matrix_bytes(dtype, r, H + r);
    if (cfg.markov_head_type == "rnn") b += WeightArena::matrix_bytes(dtype, 3 * r, 2 * r + H);
    return b;
  }

  SpecMethod method() const override { return SpecMethod::DSpark; }
  int max_draft_tokens() const override { return bb_.config().block_size; }
  bool has_confidence() const override { return bb_.config().confidence_head; }

  // Every job's block runs through the backbone together; the Markov head then samples each
  // block left to right.
  void propose_batch(std::span<const DraftJob> jobs) override {
    draft_logits(jobs, /*first_row=*/0);
    for (size_t j = 0; j < jobs.size(); ++j)
      if (jobs[j].k > 0) sample_block(jobs[j], logits_[j], hidden_[j], dv_[j]);
  }

 private:
  // z_k = U_k + W2 W1[x_{k-1}] (U: the head's logits of slot k, in place), x_k drawn from z_k.
  void sample_block(const DraftJob& job, float* U, const float* h, bool dv) {
    const DrafterConfig& cfg = bb_.config();
    Draft& out = *job.out;
    const int k = job.k;
    const WeightMatrix& w2 = dv ? w2_draft_ : w2_;
    const int64_t H = bb_.hidden(), V = bb_.head(dv).n, r = cfg.markov_rank;
    e_.resize(size_t(std::max<int64_t>(r, 1)));
    ge_.resize(size_t(std::max<int64_t>(r, 1)));
    feat_.resize(size_t(H + 2 * r + 1));
    joint_out_.resize(size_t(3 * std::max<int64_t>(r, 1)));
    state_.assign(size_t(std::max<int64_t>(r, 1)), 0.f);
    int32_t prev = job.anchor;
    for (int i = 0; i < k; ++i) {
      float* z = U + int64_t(i) * V;
      const float* hi = h + int64_t(i) * H;
      if (r > 0) {
        embed_rows(w1_.data, w1_.dtype, int(r), &prev, 1, e_.data(), r);  // W1[x_{k-1}]
        const float* head_in = e_.data();
        if (cfg.markov_head_type == "gated") {
          std::memcpy(feat_.data(), hi, size_t(H) * 4);
          std::memcpy(feat_.data() + H, e_.data(), size_t(r) * 4);
          gemm(feat_.data(), 1, gate_, ge_.data());
          for (int64_t j = 0; j < r; ++j)
            ge_[size_t(j)] = sigmoid(ge_[size_t(j)] + gate_bias_[j]) * e_[size_t(j)];
          head_in = ge_.data();
        } else if (cfg.markov_head_type == "rnn") {
          std::memcpy(feat_.data(), state_.data(), size_t(r) * 4);
          std::memcpy(feat_.data() + r, e_.data(), size_t(r) * 4);
          std::memcpy(feat_.data() + 2 * r, hi, size_t(H) * 4);
          gemm(feat_.data(), 1, joint_, joint_out_.data());
          for (int64_t j = 0; j < 3 * r; ++j) joint_out_[size_t(j)] += joint_bias_[j];
          for (int64_t j = 0; j < r; ++j) {  // chunks: gate, candidate, output
            const float g = sigmoid(joint_out_[size_t(j)]);
            state_[size_t(j)] =
                g * state_[size_t(j)] + (1.f - g) * std::tanh(joint_out_[size_t(r + j)]);
            ge_[size_t(j)] = std::tanh(joint_out_[size_t(2 * r + j)]);
          }
          head_in = ge_.data();
        }
        gemm(head_in, 1, w2, z,
             /*accumulate=*/true);  // z += W2 . (W1[x_{k-1}] or its gated / rnn form)
      }
      if (conf_w_) {
        double s = conf_b_;
        for (int64_t j = 0; j < H; ++j) s += double(conf_w_[j]) * hi[j];
        if (cfg.confidence_with_markov)
          for (int64_t j = 0; j < r; ++j) s += double(conf_w_[H + j]) * e_[size_t(j)];
        const float t =
            size_t(i) < cfg.sts_temperatures.size() ? cfg.sts_temperatures[size_t(i)] : 1.f;
        out.confidence.push_back(sigmoid(float(s) / t));
        out.confidence_logit.push_back(float(s));
      }
      prev = draw_next(job, z, dv);
    }
  }

  WeightMatrix w1_, w2_, w2_draft_, gate_, joint_;
  const float* gate_bias_ = nullptr;
  const float* joint_bias_ = nullptr;
  const float* conf_w_ = nullptr;
  float conf_b_ = 0;
  Buffer<float> e_, ge_, feat_, joint_out_;
  std::vector<float> state_;
};

}  // namespace

std::unique_ptr<Drafter> make_dspark_drafter(const DrafterConfig& cfg, const Model& target,
                                             const WeightSource& src, DType dtype,
                                             std::vector<int32_t> to_target) {
  if (!to_target.empty() && int(to_target.size()) != cfg.draft_vocab_size)
    fail(cfg.path, ": draft_vocab_size ", cfg.draft_vocab_size, " but the draft vocabulary maps ",
         to_target.size(), " ids");
  return std::make_unique<DsparkDrafter>(cfg, target, src, dtype, std::move(to_target));
}

std::vector<std::string> dspark_head_names(const DrafterConfig& cfg) {
  std::vector<std::string> n;
  if (cfg.markov_rank > 0) {
    n = {"markov_head.markov_w1.weight", "markov_head.markov_w2.weight"};
    if (cfg.markov_head_type == "gated")
      n.insert(n.end(), {"markov_head.gate_proj.weight", "markov_head.gate_proj.bias"});
    if (cfg.markov_head_type == "rnn")
      n.insert(n.end(), {"markov_head.joint_proj.weight", "markov_head.joint_proj.bias"});
  }
  if (cfg.confidence_head)
    n.insert(n.end(), {"confidence_head.proj.weight", "confidence_head.proj.bias"});
  return n;
}

}  // namespace dspark

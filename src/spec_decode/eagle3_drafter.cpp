// EAGLE-3: a fused decoder layer drafts one token per step. Step input = [input_norm(
// embed(x_{t+1})) ; hidden_norm(g_t)] where g_t = fc(three target layers) for verified rows and
// the drafter's own previous output for chained drafts; logits over a reduced draft vocabulary
// map back to target ids through d2t. A multi-layer drafter (as vLLM loads one) runs plain
// decoder layers layers.1.. after the fused one, each with its own KV cache.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "model/kv_cache.h"
#include "model/layer.h"
#include "spec_decode/drafters.h"

namespace dspark {

std::vector<std::string> eagle3_names(const DrafterConfig& cfg) {
  std::vector<std::string> n;
  for (int i = 0; i < std::max(1, cfg.layers.num_layers); ++i) {
    std::vector<std::string> li = decoder_layer_names(cfg.layers, "layers." + std::to_string(i) + ".");
    n.insert(n.end(), li.begin(), li.end());
  }
  n.insert(n.end(), {"layers.0.hidden_norm.weight", "fc.weight", "norm.weight", "lm_head.weight", "embed_tokens.weight",
                     "d2t", "t2d"});
  return n;
}

namespace {

class Eagle3Drafter : public Drafter {
 public:
  Eagle3Drafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src, DType dtype,
                std::vector<int32_t> to_target)
      : cfg_(cfg),
        kv_(std::max(1, cfg.layers.num_layers), cfg.layers.num_kv_heads, cfg.layers.head_dim, dtype, 1 << 20),
        vocab_(target.config().vocab_size),
        layers_(cfg.target_layer_ids) {
    const ModelConfig& L = cfg.layers;
    const ModelConfig& T = target.config();
    const int64_t H = L.hidden_size, feat = int64_t(cfg.target_layer_ids.size()) * T.hidden_size;
    if (L.num_layers < 1) fail(cfg.path, ": field 'num_hidden_layers' must be at least 1, got ", L.num_layers);
    if (H != T.hidden_size) fail(cfg.path, ": the drafter's hidden_size ", H, " differs from the target's ", T.hidden_size);
    draft_vocab_ = cfg.draft_vocab_size > 0 ? cfg.draft_vocab_size : int(T.vocab_size);
    for (int id : cfg.target_layer_ids)
      if (id < -1 || id >= T.num_layers)
        fail(cfg.path, ": target layer id ", id, " is outside the target's layers [-1, ", T.num_layers - 1, "]");
    const bool own_embed = src.has("embed_tokens.weight");
    size_t bytes = WeightArena::matrix_bytes(dtype, H, feat) + decoder_layer_bytes(L, dtype, 2 * H) +
                   WeightArena::matrix_bytes(dtype, draft_vocab_, H) +
                   size_t(L.num_layers - 1) * decoder_layer_bytes(L, dtype, H);
    if (own_embed) bytes += WeightArena::matrix_bytes(dtype, T.vocab_size, H);
    arena_ = std::make_unique<WeightArena>(dtype, bytes);
    fc_ = arena_->matrix(src, "fc.weight", H, feat);
    arena_->pack(fc_);
    layer_ = load_decoder_layer(src, "layers.0.", L, *arena_, 2 * H);
    for (int i = 1; i < L.num_layers; ++i)
      upper_.push_back(load_decoder_layer(src, "layers." + std::to_string(i) + ".", L, *arena_, H));
    hidden_norm_ = arena_->vector(src, "layers.0.hidden_norm.weight", H);
    norm_ = arena_->vector(src, "norm.weight", H);
    lm_head_ = arena_->matrix(src, "lm_head.weight", draft_vocab_, H);
    arena_->pack(lm_head_);
    if (own_embed) {
      own_embed_ = arena_->matrix(src, "embed_tokens.weight", T.vocab_size, H);
      embed_ = &own_embed_;
    } else {
      embed_ = &target.embed();
    }
    to_target_ = std::move(to_target);  // validated by draft_vocab_map
    if (to_target_.empty())
      for (int i = 0; i < draft_vocab_; ++i) to_target_.push_back(i);
    if (int(to_target_.size()) != draft_vocab_)
      fail(cfg.path, ": draft_vocab_size ", draft_vocab_, " but the draft vocabulary maps ", to_target_.size(), " ids");
    rope_ = L.rope();
    if (cfg.int8_weights) {
      quantize_int8_if_paired(fc_);
      quantize_int8_if_paired(layer_);
      for (LayerWeights& lw : upper_) quantize_int8_if_paired(lw);
      quantize_int8_if_paired(lm_head_);
    }
    out_hidden_.resize(size_t(H));
  }

  SpecMethod method() const override { return SpecMethod::Eagle3; }
  const std::vector<int>& target_layers() const override { return layers_; }
  int max_draft_tokens() const override { return 64; }

  int begin() override {
    const int seq = kv_.create_sequence();
    states_[seq] = State{};
    return seq;
  }

  void extend(int seq, std::span<const int32_t> tokens, int pos, const TargetFeatures& feats) override {
    State& st = states_.at(seq);
    if (feats.rows == 0) return;
    // The previous chunk's last feature pairs with this chunk's first token.
    if (!st.pending.empty()) step(seq, tokens.subspan(0, 1), st.pending.data(), pos - 1, nullptr);
    fuse(feats, st);
    // Pairs (x_{t+1}, g_t) inside the chunk; the last feature waits for the next token.
    const int pairs = feats.rows - 1;
    if (pairs > 0) step(seq, tokens.subspan(1, size_t(pairs)), g_.data(), pos, nullptr);
    st.pending.assign(g_.data() + int64_t(pairs) * hidden(), g_.data() + int64_t(pairs + 1) * hidden());
    commit(seq, st, tokens, pos, pos + pairs);
  }

  void accept(int seq, std::span<const int32_t> committed, int pos, const TargetFeatures& feats) override {
    State& st = states_.at(seq);
    // After a plain step (no propose() wrote it) row pos - 1, the anchor with the feature before
    // it, is still to write.
    if (kv_.length(seq) == pos - 1 && !st.pending.empty())
      step(seq, committed.subspan(0, 1), st.pending.data(), pos - 1, nullptr);
    fuse(feats, st);
    const int a = feats.rows - 1;  // accepted drafts
    if (a > 0) step(seq, committed.subspan(1, size_t(a)), g_.data(), pos, nullptr);
    st.pending.assign(g_.data() + int64_t(a) * hidden(), g_.data() + int64_t(a + 1) * hidden());
    commit(seq, st, committed, pos, pos + a);
  }

  void end(int seq) override {
    kv_.free_sequence(seq);
    states_.erase(seq);
  }

  // Prefix caching. Row p pairs token p + 1 with feature p, so a cached block's last row holds
  // the token after the block, which its key (the tokens of the block and those before it) does
  // not cover: of a match the last block is dropped and recomputed, as vLLM does for EAGLE, and a
  // block is never swapped for a cached one with its key (whose last row may pair another token).
  // Each block before the last matched one is trusted through its child: the child was committed
  // under this very block by a sequence whose next token, in the child's key, matched too.
  void enable_prefix_caching() override { kv_.set_prefix_caching(true, false); }
  int attach_prefix(int seq, std::span<const int32_t> tokens, int max_len) override {
    const int matched = kv_.attach_prefix(seq, tokens, max_len);
    const int keep = std::max(0, matched - kKvBlock);
    kv_.truncate(seq, keep);
    State& st = states_.at(seq);
    st.keys.assign(tokens.begin(), tokens.begin() + keep);
    st.pending.clear();  // row keep - 1 is cached: nothing waits for the next token
    return keep;
  }

  void propose(int seq, int32_t anchor, int pos, int k, const DraftSampling& ds, Draft& out) override {
    out.clear();
    out.vocab = vocab_;
    if (k <= 0) return;
    State& st = states_.at(seq);
    const int64_t H = hidden();
    feature_.assign(st.pending.begin(), st.pending.end());
    if (ds.dense_q()) out.q.resize(size_t(k) * size_t(vocab_));
    int32_t token = anchor;
    for (int i = 0; i < k; ++i) {
      // The pair (token, feature) sits at position pos - 1 + i.
      step(seq, std::span<const int32_t>(&token, 1), feature_.data(), pos - 1 + i, out_hidden_.data());
      head(out_hidden_.data(), 1);
      token = pick(draft_logits_.data(), ds, out, i);
      feature_.assign(out_hidden_.data(), out_hidden_.data() + H);  // the layer's own output feeds the next step
    }
    kv_.truncate(seq, pos);  // drop the chained rows; keep the verified ones
  }

  // Every job's step i in one pass through the layers and the head (jobs with k > i), so a batch
  // streams the drafter's weights k times, not k times per sequence. The rows are what propose()
  // runs one at a time; each job samples from its own stream, in its own order.
  void propose_batch(std::span<const DraftJob> jobs) override {
    if (jobs.size() < 2) {
      Drafter::propose_batch(jobs);
      return;
    }
    const int64_t H = hidden();
    const size_t J = jobs.size();
    int kmax = 0;
    batch_tokens_.resize(J);
    batch_feats_.resize(J * size_t(H));
    for (size_t j = 0; j < J; ++j) {
      const DraftJob& job = jobs[j];
      Draft& out = *job.out;
      out.clear();
      out.vocab = vocab_;
      if (job.k <= 0) continue;
      if (job.sampling.dense_q()) out.q.resize(size_t(job.k) * size_t(vocab_));
      const std::vector<float>& pending = states_.at(job.seq).pending;
      std::memcpy(batch_feats_.data() + j * size_t(H), pending.data(), size_t(H) * 4);
      batch_tokens_[j] = job.anchor;
      kmax = std::max(kmax, job.k);
    }
    for (int i = 0; i < kmax; ++i) {
      // Gather the rows of the jobs still drafting; every sequence's cache grows before any
      // block table is read.
      active_.clear();
      for (size_t j = 0; j < J; ++j)
        if (jobs[j].k > i) active_.push_back(j);
      const int n = int(active_.size());
      step_tokens_.resize(size_t(n));
      step_feats_.resize(size_t(n) * size_t(H));
      for (int r = 0; r < n; ++r) {
        const size_t j = active_[size_t(r)];
        grow(jobs[j].seq, jobs[j].pos + i);
        step_tokens_[size_t(r)] = batch_tokens_[j];
        std::memcpy(step_feats_.data() + int64_t(r) * H, batch_feats_.data() + j * size_t(H), size_t(H) * 4);
      }
      blocks_.clear();
      for (int r = 0; r < n; ++r) {
        const DraftJob& job = jobs[active_[size_t(r)]];
        blocks_.push_back({kv_.block_table(job.seq), job.pos - 1 + i, 1});
      }
      run_rows(step_tokens_.data(), step_feats_.data(), blocks_);
      head(res_.data(), n);
      for (int r = 0; r < n; ++r) {
        const size_t j = active_[size_t(r)];
        const float* row_out = res_.data() + int64_t(r) * H;
        batch_tokens_[j] = pick(draft_logits_.data() + int64_t(r) * draft_vocab_, jobs[j].sampling, *jobs[j].out, i);
        std::memcpy(batch_feats_.data() + j * size_t(H), row_out, size_t(H) * 4);
      }
    }
    for (const DraftJob& job : jobs)
      if (job.k > 0) kv_.truncate(job.seq, job.pos);
  }

 private:
  struct State {
    std::vector<float> pending;  // g of the last verified row, waiting for its next token
    std::vector<int32_t> keys;   // with prefix caching: the sequence's tokens, position by position
  };

  // With prefix caching: `tokens` hold positions [pos, ...); the rows from the cache's committed
  // end to `end` are written and verified, and are committed under the tokens at their positions
  // (a row's key is its own position's token; attach_prefix accounts for the next one).
  void commit(int seq, State& st, std::span<const int32_t> tokens, int pos, int end) {
    if (!kv_.prefix_caching() || int(st.keys.size()) < pos) return;  // after a gap, nothing
    st.keys.resize(size_t(pos));
    st.keys.insert(st.keys.end(), tokens.begin(), tokens.end());
    const int from = kv_.committed(seq);
    end = std::min(end, int(st.keys.size()));
    if (end > from)
      kv_.commit(seq, from, std::span<const int32_t>(st.keys).subspan(size_t(from), size_t(end - from)));
  }

  int64_t hidden() const { return cfg_.layers.hidden_size; }

  // draft_logits_[n][draft_vocab] = lm_head(norm(h[n][H])).
  void head(const float* h, int n) {
    const int64_t H = hidden();
    hidden_.resize(size_t(n) * size_t(H));
    rmsnorm(h, H, norm_, hidden_.data(), H, n, int(H), cfg_.layers.rms_norm_eps);
    draft_logits_.resize(size_t(n) * size_t(draft_vocab_));
    gemm(hidden_.data(), n, lm_head_, draft_logits_.data());
  }

  // Draft i of `out` from one row of draft logits: sampled from q (kept in out.q) or the argmax.
  int32_t pick(const float* logits, const DraftSampling& ds, Draft& out, int i) {
    full_.assign(size_t(vocab_), -std::numeric_limits<float>::infinity());
    for (int d = 0; d < draft_vocab_; ++d) full_[size_t(to_target_[size_t(d)])] = logits[d];
    const int32_t token =
        ds.draw(full_.data(), vocab_, sampler_, ds.dense_q() ? out.q.data() + int64_t(i) * vocab_ : nullptr);
    out.tokens.push_back(token);
    return token;
  }

  // g_ = fc(features) for all rows.
  void fuse(const TargetFeatures& f, State&) {
    if (f.width != fc_.k) fail("eagle3: target features have width ", f.width, ", fc expects ", fc_.k);
    g_.resize(size_t(f.rows) * size_t(hidden()));
    gemm(f.data, f.rows, f.width, fc_, g_.data(), hidden());
  }

  // Runs pairs (tokens[i], g[i]) at positions pos0 + i through the layers (causal), writing K/V;
  // stores the pre-norm output of the last row in `out` when given.
  void step(int seq, std::span<const int32_t> tokens, const float* g, int pos0, float* out) {
    const int n = int(tokens.size());
    grow(seq, pos0 + n);
    const SeqRows::Block b{kv_.block_table(seq), pos0, n};
    run_rows(tokens.data(), g, std::span<const SeqRows::Block>(&b, 1));
    if (out) std::memcpy(out, res_.data() + int64_t(n - 1) * hidden(), size_t(hidden()) * 4);
  }

  void grow(int seq, int len) {
    kv_.reserve(seq, len);
    kv_.set_length(seq, std::max(kv_.length(seq), len));
  }

  // The rows of `blocks` (each causal within its sequence), their tokens and features one after
  // another, through the fused layer and the upper ones; the pre-norm outputs stay in res_.
  void run_rows(const int32_t* tokens, const float* g, std::span<const SeqRows::Block> blocks) {
    const ModelConfig& L = cfg_.layers;
    int n = 0;
    for (const SeqRows::Block& b : blocks) n += b.n;
    const int64_t H = L.hidden_size;
    in_.resize(size_t(n) * size_t(2 * H));
    res_.resize(size_t(n) * size_t(H));
    emb_.resize(size_t(n) * size_t(H));
    embed_rows(embed_->data, embed_->dtype, int(H), tokens, n, emb_.data(), H);
    rmsnorm(emb_.data(), H, layer_.attn_norm, in_.data(), 2 * H, n, int(H), L.rms_norm_eps);
    rmsnorm(g, H, hidden_norm_, in_.data() + H, 2 * H, n, int(H), L.rms_norm_eps);
    for (int i = 0; i < n; ++i) {
      float* r = res_.data() + int64_t(i) * H;
      if (cfg_.norm_before_residual) std::memcpy(r, in_.data() + int64_t(i) * 2 * H + H, size_t(H) * 4);
      else std::memcpy(r, g + int64_t(i) * H, size_t(H) * 4);
    }
    const LayerRows lr = rows_.make_blocks(rope_, blocks, SeqRows::Visibility::Causal, cfg_.sliding_window);
    attention_block(L, layer_, kv_.layer(0), lr, in_.data(), 2 * H, res_.data(), scratch_);
    mlp_block(L, layer_, n, res_.data(), scratch_);
    for (size_t i = 0; i < upper_.size(); ++i) decoder_layer(L, upper_[i], kv_.layer(int(i) + 1), lr, res_.data(), scratch_);
  }

  DrafterConfig cfg_;
  KvCache kv_;
  int vocab_;
  int draft_vocab_ = 0;
  std::vector<int> layers_;
  std::unique_ptr<WeightArena> arena_;
  WeightMatrix fc_, lm_head_, own_embed_;
  const WeightMatrix* embed_ = nullptr;
  LayerWeights layer_;
  std::vector<LayerWeights> upper_;  // layers.1.. of a multi-layer drafter
  const float* hidden_norm_ = nullptr;
  const float* norm_ = nullptr;
  std::vector<int32_t> to_target_;
  Rope rope_;
  std::unordered_map<int, State> states_;
  LayerScratch scratch_;
  Sampler sampler_;
  Buffer<float> g_, in_, res_, emb_, hidden_, draft_logits_;
  SeqRows rows_;
  std::vector<float> feature_, full_;
  Buffer<float> out_hidden_;
  // propose_batch: each job's next token and feature, the rows of one step, the jobs in it.
  std::vector<int32_t> batch_tokens_, step_tokens_;
  Buffer<float> batch_feats_, step_feats_;
  std::vector<size_t> active_;
  std::vector<SeqRows::Block> blocks_;
};

}  // namespace

std::unique_ptr<Drafter> make_eagle3_drafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src,
                                             DType dtype, std::vector<int32_t> to_target) {
  return std::make_unique<Eagle3Drafter>(cfg, target, src, dtype, std::move(to_target));
}

}  // namespace dspark

#include "spec_decode/dflash_backbone.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"

namespace dspark {

std::vector<std::string> dflash_backbone_names(const DrafterConfig& cfg) {
  std::vector<std::string> n{"fc.weight",
                             "hidden_norm.weight",
                             "norm.weight",
                             "embed_tokens.weight",
                             "lm_head.weight",
                             "d2t",
                             "t2d"};
  for (int i = 0; i < cfg.layers.num_layers; ++i)
    for (auto& s : decoder_layer_names(cfg.layers, "layers." + std::to_string(i) + "."))
      n.push_back(s);
  return n;
}

DflashBackbone::DflashBackbone(const DrafterConfig& cfg, const Model& target,
                               const WeightSource& src, DType dtype, size_t arena_extra,
                               int64_t kv_tokens, std::vector<int32_t> to_target)
    : cfg_(cfg),
      target_vocab_(target.config().vocab_size),
      to_target_(std::move(to_target)),
      kv_(cfg.layers.num_layers, cfg.layers.num_kv_heads, cfg.layers.head_dim, dtype, kv_tokens) {
  const ModelConfig& L = cfg.layers;
  const ModelConfig& T = target.config();
  const int64_t H = L.hidden_size, feat = int64_t(cfg.target_layer_ids.size()) * T.hidden_size;
  if (H != T.hidden_size)
    fail(cfg.path, ": the drafter's hidden_size ", H, " differs from the target's ", T.hidden_size);
  if (L.vocab_size != T.vocab_size)
    fail(cfg.path, ": the drafter's vocab_size ", L.vocab_size, " differs from the target's ",
         T.vocab_size);
  if (cfg.mask_token_id >= T.vocab_size)
    fail(cfg.path, ": field 'mask_token_id' ", cfg.mask_token_id,
         " is outside the target's vocabulary (", T.vocab_size, ")");
  for (int id : cfg.target_layer_ids)
    if (id < -1 || id >= T.num_layers)
      fail(cfg.path, ": target layer id ", id, " is outside the target's layers [-1, ",
           T.num_layers - 1, "]");
  const bool own_embed = src.has("embed_tokens.weight"), own_head = src.has("lm_head.weight");
  const bool reduced = !to_target_.empty(), full = !reduced || cfg.keeps_full_head;
  const int64_t Vd = int64_t(to_target_.size()), head_rows = full ? T.vocab_size : Vd;
  size_t bytes = WeightArena::matrix_bytes(dtype, H, feat) +
                 decoder_layer_bytes(L, dtype, H) * size_t(L.num_layers) + arena_extra;
  if (own_embed) bytes += WeightArena::matrix_bytes(dtype, T.vocab_size, H);
  if (own_head) bytes += WeightArena::matrix_bytes(dtype, head_rows, H);
  if (reduced && full) bytes += WeightArena::matrix_bytes(dtype, Vd, H);
  arena_ = std::make_unique<WeightArena>(dtype, bytes);
  fc_ = arena_->matrix(src, "fc.weight", H, feat);
  arena_->pack(fc_);
  hidden_norm_ = arena_->vector(src, "hidden_norm.weight", H);
  for (int i = 0; i < L.num_layers; ++i)
    layers_.push_back(load_decoder_layer(src, "layers." + std::to_string(i) + ".", L, *arena_, H));
  norm_ = arena_->vector(src, "norm.weight", H);
  if (own_embed) {
    own_embed_ = arena_->matrix(src, "embed_tokens.weight", T.vocab_size, H);
    embed_ = &own_embed_;
  } else {
    embed_ = &target.embed();
  }
  if (!full && !own_head)
    fail(cfg.path,
         ": a head of the draft vocabulary only needs the drafter's own 'lm_head.weight'");
  const WeightMatrix* head = &target.lm_head();
  if (own_head) {
    own_lm_head_ = arena_->matrix(src, "lm_head.weight", head_rows, H);
    arena_->pack(own_lm_head_);
    head = &own_lm_head_;
  }
  if (full) full_head_ = head;
  if (!full) draft_head_ = head;
  if (reduced && full) {
    draft_lm_head_ = arena_->row_copy(*head, to_target_);
    draft_head_ = &draft_lm_head_;
  }
  rope_ = L.rope();
  if (cfg.int8_weights) {  // never the target's embeddings or head, which this arena does not hold
    quantize_int8_if_paired(fc_);
    for (LayerWeights& lw : layers_) quantize_int8_if_paired(lw);
    if (own_head) quantize_int8_if_paired(own_lm_head_);
    if (reduced && full) quantize_int8_if_paired(draft_lm_head_);
  }
}

int32_t DflashBackbone::draw(const float* z, bool draft_vocab, const DraftSampling& ds,
                             Sampler& sampler, float* q_row) {
  const int n = head(draft_vocab).n;
  if (ds.processor) return draw_processed(z, draft_vocab, ds, sampler, q_row);
  if (!ds.dense_q()) return to_target(draft_vocab, argmax(z, n));
  if (!draft_vocab) {
    sampler.dense(z, n, ds.params, q_row);  // the exact q the verifier will see
    return Sampler::draw_dense(q_row, n, *ds.rng);
  }
  qd_.resize(size_t(n));
  sampler.dense(z, n, ds.params, qd_.data());
  const int d = Sampler::draw_dense(qd_.data(), n, *ds.rng);
  std::memset(q_row, 0, size_t(target_vocab_) * sizeof(float));
  for (int i = 0; i < n; ++i) q_row[to_target_[size_t(i)]] = qd_[size_t(i)];
  return to_target_[size_t(d)];
}

// With a logits processor the row is processed over the target's vocabulary (tokens outside the
// draft vocabulary at -inf), then drawn from as it is.
int32_t DflashBackbone::draw_processed(const float* z, bool draft_vocab, const DraftSampling& ds,
                                       Sampler& sampler, float* q_row) {
  const int V = target_vocab_, n = head(draft_vocab).n;
  full_.resize(size_t(V));
  if (draft_vocab) {
    std::fill(full_.data(), full_.data() + V, -std::numeric_limits<float>::infinity());
    for (int i = 0; i < n; ++i) full_[size_t(to_target_[size_t(i)])] = z[i];
  } else {
    std::copy(z, z + V, full_.data());
  }
  return ds.draw(full_.data(), V, sampler, q_row);
}

DflashBackboneDrafter::DflashBackboneDrafter(const DrafterConfig& cfg, const Model& target,
                                             const WeightSource& src, DType dtype,
                                             size_t arena_extra, std::vector<int32_t> to_target)
    : bb_(cfg, target, src, dtype, arena_extra, 1 << 20, std::move(to_target)) {}

void DflashBackboneDrafter::propose(int seq, int32_t anchor, int pos, int k,
                                    const DraftSampling& ds, Draft& out) {
  const DraftJob job{seq, anchor, pos, k, ds, &out};
  propose_batch(std::span<const DraftJob>(&job, 1));
}

int32_t DflashBackboneDrafter::draw_next(const DraftJob& job, const float* z, bool dv) {
  Draft& out = *job.out;
  float* q_row = nullptr;
  if (job.sampling.dense_q()) {
    const int vocab = bb_.target_vocab();
    if (out.q.empty()) out.q.resize(size_t(job.k) * size_t(vocab));
    q_row = out.q.data() + int64_t(out.tokens.size()) * vocab;
  }
  const int32_t x = bb_.draw(z, dv, job.sampling, sampler_, q_row);
  out.tokens.push_back(x);
  return x;
}

int DflashBackbone::new_sequence() {
  return kv_.create_sequence();
}
void DflashBackbone::free_sequence(int seq) {
  kv_.free_sequence(seq);
}

void DflashBackbone::add_contexts(std::span<const AcceptJob> jobs) {
  const ModelConfig& L = cfg_.layers;
  const int64_t H = L.hidden_size;
  int n = 0, parts = 0;
  const float* in = nullptr;  // the fc input: one sequence's rows as given, several gathered
  blocks_.clear();
  for (const AcceptJob& j : jobs) {
    if (j.feats.rows == 0) continue;
    if (j.feats.width != fc_.k)
      fail("drafter: context features have width ", j.feats.width, ", fc expects ", fc_.k);
    if (kv_.length(j.seq) != j.pos)
      fail("drafter: context rows start at ", j.pos, " but the draft cache holds ",
           kv_.length(j.seq));
    n += j.feats.rows;
    ++parts;
    in = j.feats.data;
  }
  if (n == 0) return;
  if (parts > 1) ctx_in_.resize(size_t(n) * size_t(fc_.k));
  int row = 0;
  for (const AcceptJob& j : jobs) {
    if (j.feats.rows == 0) continue;
    if (parts > 1)
      std::memcpy(ctx_in_.data() + int64_t(row) * fc_.k, j.feats.data,
                  size_t(j.feats.rows) * size_t(fc_.k) * 4);
    row += j.feats.rows;
    kv_.reserve(j.seq, j.pos + j.feats.rows);
    kv_.set_length(j.seq, j.pos + j.feats.rows);
    blocks_.push_back({kv_.block_table(j.seq), j.pos, j.feats.rows});
  }
  if (parts > 1) in = ctx_in_.data();
  ctx_.resize(size_t(n) * size_t(H));
  gemm(in, n, fc_.k, fc_, ctx_.data(), H);
  rmsnorm(ctx_.data(), H, hidden_norm_, ctx_.data(), H, n, int(H), L.rms_norm_eps);
  const LayerRows lr = rows_.make_blocks(rope_, blocks_, SeqRows::Visibility::None);
  for (int l = 0; l < L.num_layers; ++l)
    inject_context_kv(L, layers_[size_t(l)], kv_.layer(l), lr, ctx_.data(), scratch_);
  if (kv_.prefix_caching())
    for (const AcceptJob& j : jobs)
      if (j.feats.rows > 0) {
        if (j.committed.size() != size_t(j.feats.rows))
          fail("drafter: ", j.feats.rows, " context rows come with ", j.committed.size(), " tokens");
        kv_.commit(j.seq, j.pos, j.committed);
      }
}

void DflashBackbone::draft_logits(std::span<const DraftJob> jobs, int first_row,
                                  std::vector<float*>& logits, std::vector<const float*>& hidden,
                                  std::vector<bool>& dv) {
  const ModelConfig& L = cfg_.layers;
  const int gamma = cfg_.block_size;
  const int64_t H = L.hidden_size;
  logits.assign(jobs.size(), nullptr);
  hidden.assign(jobs.size(), nullptr);
  dv.assign(jobs.size(), false);
  blocks_.clear();
  block_tokens_.clear();
  for (const DraftJob& j : jobs) {
    j.out->clear();
    j.out->vocab = target_vocab_;
    if (j.k <= 0) continue;
    if (first_row + j.k > gamma)
      fail("drafter: ", j.k, " drafts requested, the block of ", gamma, " yields ",
           gamma - first_row);
    if (kv_.length(j.seq) != j.pos)
      fail("drafter: the block starts at ", j.pos, " but the context ends at ", kv_.length(j.seq));
    kv_.reserve(j.seq, j.pos + gamma);
    kv_.set_length(j.seq, j.pos + gamma);
    block_tokens_.push_back(j.anchor);  // the anchor slot, then masks
    block_tokens_.insert(block_tokens_.end(), size_t(gamma - 1), cfg_.mask_token_id);
    blocks_.push_back({kv_.block_table(j.seq), j.pos, gamma});
  }
  if (blocks_.empty()) return;
  const int n = int(block_tokens_.size());
  h_.resize(size_t(n) * size_t(H));
  out_.resize(size_t(n) * size_t(H));
  embed_rows(embed_->data, embed_->dtype, int(H), block_tokens_.data(), n, h_.data(), H);
  const LayerRows lr = rows_.make_blocks(rope_, blocks_, SeqRows::Visibility::WholeBlock, cfg_.sliding_window);
  for (int l = 0; l < L.num_layers; ++l)
    decoder_layer(L, layers_[size_t(l)], kv_.layer(l), lr, h_.data(), scratch_);
  for (const DraftJob& j : jobs)
    if (j.k > 0) kv_.truncate(j.seq, j.pos);  // keep context rows only
  rmsnorm(h_.data(), H, norm_, out_.data(), H, n, int(H), L.rms_norm_eps);
  // Gather each job's scored rows per head, one product per head.
  int rows[2] = {0, 0};
  for (size_t i = 0; i < jobs.size(); ++i)
    if (jobs[i].k > 0) {
      dv[i] = drafts_over_draft_vocab(jobs[i].sampling);
      rows[dv[i]] += jobs[i].k;
    }
  for (int g = 0; g < 2; ++g) {
    if (rows[g] == 0) continue;
    const WeightMatrix& head = this->head(g == 1);
    head_in_[g].resize(size_t(rows[g]) * size_t(H));
    head_out_[g].resize(size_t(rows[g]) * size_t(head.n));
    int r = 0, b = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (jobs[i].k <= 0) continue;
      const float* src = out_.data() + (int64_t(b++) * gamma + first_row) * H;
      if (int(dv[i]) != g) continue;
      hidden[i] = src;
      std::memcpy(head_in_[g].data() + int64_t(r) * H, src, size_t(jobs[i].k) * size_t(H) * 4);
      logits[i] = head_out_[g].data() + int64_t(r) * head.n;
      r += jobs[i].k;
    }
    gemm(head_in_[g].data(), rows[g], H, head, head_out_[g].data(), head.n);
  }
}

}  // namespace dspark

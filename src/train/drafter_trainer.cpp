#include "train/drafter_trainer.h"

#include <torch/version.h>

// Data parallelism uses libtorch 1.x's gloo process group (Debian 12's libtorch). libtorch 2.x
// moved it behind c10d::Backend and its wheels may lack gloo's headers: there (a GPU machine's
// PyTorch) the trainer builds without it and refuses --world-size above 1.
#if defined(USE_C10D_GLOO) && TORCH_VERSION_MAJOR < 2 && __has_include(<gloo/algorithm.h>)
#define DSPARK_TRAIN_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include "core/cpu.h"
#include "core/crc32.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "core/safetensors.h"
#include "core/timer.h"
#include "datagen/hidden_dataset.h"
#include "tokenizer/tokenizer.h"
#include "train/caching_allocator.h"
#include "train/checkpoint.h"
#include "train/drafter_losses.h"
#include "train/drafter_model.h"
#include "train/drafter_samples.h"
#include "train/progress.h"
#include "train/precision.h"
#include "train/qwen3_model.h"
#include "train/schedule.h"

namespace dspark::train {

namespace fs = std::filesystem;
using json = nlohmann::json;
using torch::indexing::Slice;

json DrafterTrainConfig::to_json() const {
  return {{"method", spec_method_name(method)}, {"target", target}, {"data", data}, {"out", out}, {"layers", layers},
          {"drafts", drafts}, {"markov_rank", markov_rank}, {"markov_head", markov_head}, {"confidence", confidence},
          {"anchors", anchors}, {"sliding_window", sliding_window}, {"epochs", epochs}, {"steps", steps}, {"batch", batch}, {"lr", lr},
          {"warmup_ratio", warmup_ratio}, {"min_lr_ratio", min_lr_ratio}, {"weight_decay", weight_decay}, {"clip", clip},
          {"ce_weight", ce_weight}, {"l1_weight", l1_weight}, {"conf_weight", conf_weight}, {"decay", decay},
          {"validation_fraction", validation_fraction}, {"seed", seed}, {"precision", precision}, {"world_size", world_size},
          {"init", init}, {"online", online.enabled}, {"prompts", online.prompts}, {"store", online.store},
          {"max_tokens", online.max_tokens}, {"target_layers", target_layers}, {"device", device}};
}

namespace {

struct Frozen {
  ModelConfig cfg;
  torch::Tensor embed;       // [V, H]
  torch::Tensor lm_head;     // [V, H]
  torch::Tensor final_norm;  // model.norm.weight [H]: online samples carry the pre-norm state
  int mask_token = -1;
};

Frozen load_frozen(const std::string& dir) {
  Frozen f;
  f.cfg = ModelConfig::from_dir(dir);
  CausalLM m(f.cfg);
  load_hf_weights(m, dir);
  f.embed = m->model->embed_tokens->weight.detach().clone();
  f.lm_head = m->lm_head_weight().detach().clone();
  f.final_norm = m->model->norm->weight.detach().to(torch::kFloat32).contiguous().clone();
  // The reserved mask token of the tokenizer, else the last row of the vocabulary.
  f.mask_token = f.cfg.vocab_size - 1;
  if (fs::exists(fs::path(dir) / "tokenizer.json")) {
    auto tok = Tokenizer::from_dir(dir);
    for (const char* name : {"<|mask|>", "<|MASK|>"})
      if (auto id = tok->token_to_id(name)) {
        f.mask_token = *id;
        break;
      }
  }
  return f;
}

DrafterConfig drafter_config(const DrafterTrainConfig& c, const Frozen& fz, const std::vector<int>& layer_ids) {
  DrafterConfig d;
  d.method = c.method;
  d.layers = fz.cfg;
  d.layers.num_layers = c.layers;
  d.layers.tie_word_embeddings = false;
  d.target_layer_ids = layer_ids;
  d.num_target_layers = fz.cfg.num_layers;
  d.mask_token_id = fz.mask_token;
  d.sliding_window = c.sliding_window;
  if (c.method == SpecMethod::DSpark) {
    d.block_size = c.drafts;
    d.markov_rank = c.markov_rank;
    d.markov_head_type = c.markov_head;
    d.confidence_head = c.confidence;
    d.confidence_with_markov = c.markov_rank > 0;
  } else if (c.method == SpecMethod::DFlash) {
    d.block_size = c.drafts + 1;  // anchor + masks; slots 1.. are the drafts
  } else {
    d.draft_vocab_size = fz.cfg.vocab_size;
    d.speculative_tokens = c.drafts;
  }
  return d;
}

void init_weights(torch::nn::Module& m, uint64_t seed) {
  torch::NoGradGuard ng;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& p : m.named_parameters()) {
    const std::string& n = p.key();
    if (p.value().dim() == 1) p.value().fill_(n.find("bias") != std::string::npos ? 0.0 : 1.0);
    else p.value().normal_(0.0, 0.02, gen);
  }
}

// Blocks built on the CPU (drafter_losses.h), on `device`.
Blocks on_device(Blocks b, const torch::Device& device) {
  if (device.is_cpu()) return b;
  for (torch::Tensor* t : {&b.inputs, &b.positions, &b.labels, &b.valid, &b.target_pos, &b.prev, &b.slot})
    *t = t->to(device);
  return b;
}

// The block pass of a DSpark / DFlash drafter over blocks `b` anchored at `anchors`: hidden rows
// h [N*g, H] and slot logits [N*g, V] in f32, with DSpark's Markov bias teacher-forced on b.prev.
// Runs under the caller's autocast.
std::pair<torch::Tensor, torch::Tensor> block_pass(BlockDrafter& m, const Frozen& fz, const torch::Tensor& features,
                                                   const Blocks& b, const std::vector<int64_t>& anchors) {
  auto h = m->backbone(features, fz.embed.index({b.inputs.reshape({-1})}), b.positions,
                       torch::tensor(anchors, torch::kInt64).to(features.device()));  // [N*g, H]
  auto logits = torch::matmul(h, fz.lm_head.t()).to(torch::kFloat32);
  if (m->markov_head) logits = logits + m->markov_head->bias(b.prev.reshape({-1}), h, b.inputs.size(1)).to(torch::kFloat32);
  return {h, logits};
}

// The per-sequence loss of a DSpark / DFlash drafter (weighted mean over its supervised slots).
torch::Tensor block_sequence_loss(BlockDrafter& m, const Frozen& fz, const TrainSample& s,
                                  const DrafterTrainConfig& c, bool bf16, uint64_t anchor_seed, LossParts* parts) {
  const int64_t T = int64_t(s.tokens.size()), n = s.layers, H = s.hidden_size;
  const auto& hs = s.hidden;
  auto features = hs.index({Slice(), Slice(0, n)}).reshape({T, n * H});
  auto final_hidden = hs.index({Slice(), n});
  Rng rng(anchor_seed);
  auto anchors = sample_anchors(s.loss_mask, c.anchors, rng);
  if (anchors.empty()) return {};
  const bool dspark = c.method == SpecMethod::DSpark;
  const int gamma = dspark ? c.drafts : c.drafts + 1;
  Blocks b = on_device(build_blocks(s.tokens, s.loss_mask, anchors, gamma, fz.mask_token,
                                    dspark ? BlockLayout::AnchorFirst : BlockLayout::MaskOnly),
                       hs.device());
  torch::Tensor logits, conf;
  {
    // bf16 autocast for the products; logits, bias and confidence are summed and scored in f32.
    Bf16Autocast autocast(bf16);
    torch::Tensor h;
    std::tie(h, logits) = block_pass(m, fz, features, b, anchors);
    if (dspark && m->confidence_head) {
      auto in = m->cfg.confidence_with_markov ? torch::cat({h, m->markov_head->embed(b.prev.reshape({-1}))}, -1) : h;
      conf = m->confidence_head->proj(in).squeeze(-1).to(torch::kFloat32);
    }
  }
  torch::Tensor target_logits;
  {
    // Once per position (f32), then gathered: a position is the target of up to gamma slots.
    torch::NoGradGuard ng;
    target_logits = torch::matmul(final_hidden, fz.lm_head.t()).index({b.target_pos.reshape({-1})});
  }
  LossWeights w;
  if (dspark) w = {c.ce_weight, c.l1_weight, c.conf_weight, c.decay};
  else w = {1.0, 0.0, 0.0, c.decay};
  LossParts lp = block_loss(logits, target_logits, b.labels.reshape({-1}), b.valid.reshape({-1}), b.slot.reshape({-1}),
                            conf, w);
  if (parts) *parts = lp;
  if (lp.weight_sum <= 0) return {};
  return lp.total;
}

// EAGLE-3 with training-time test: step 0 reads target features, step s >= 1 its own outputs;
// each query sees step-0 keys causally plus the diagonal keys of steps 1..s.
torch::Tensor eagle3_sequence_loss(Eagle3Drafter& m, const Frozen& fz, const TrainSample& s,
                                   const DrafterTrainConfig& c, bool bf16,
                                   std::vector<torch::Tensor>* step_logits = nullptr) {
  const int64_t T = int64_t(s.tokens.size()), nl = s.layers, H = s.hidden_size, n = T - 1;
  if (n < 2) return {};
  const auto& hs = s.hidden;
  const auto dev = hs.device();
  auto features = hs.index({Slice(0, n), Slice(0, nl)}).reshape({n, nl * H});
  auto final_hidden = hs.index({Slice(), nl});
  auto tokens = torch::tensor(std::vector<int64_t>(s.tokens.begin(), s.tokens.end()), torch::kInt64).to(dev);
  auto mask = torch::tensor(std::vector<int64_t>(s.loss_mask.begin(), s.loss_mask.end()), torch::kInt64)
                  .to(dev, torch::kFloat32);
  auto& layer = *m->layers[0]->as<Eagle3Layer>();
  const int64_t n_layers = int64_t(m->layers->size());
  auto t_idx = torch::arange(n, torch::TensorOptions(dev).dtype(torch::kInt64));
  torch::Tensor target_p;  // the target's distribution at every position, once (f32)
  {
    torch::NoGradGuard ng;
    target_p = torch::softmax(torch::matmul(final_hidden, fz.lm_head.t()), -1);
  }
  Bf16Autocast autocast(bf16);  // products in bf16; the loss below is computed in f32
  auto feature = m->fc(features);
  // Keys and values of every earlier step, per layer: step s attends to its own layer's rows of
  // steps 0..s (causal over step 0, the diagonal of later steps), as the unrolled drafter does.
  std::vector<std::vector<torch::Tensor>> ks(static_cast<size_t>(n_layers)), vs(static_cast<size_t>(n_layers));
  const auto f32 = torch::TensorOptions(dev).dtype(torch::kFloat32);
  torch::Tensor total = torch::zeros({}, f32);
  const double inf = std::numeric_limits<double>::infinity();
  auto causal = torch::full({n, n}, -inf, f32).triu(1);
  auto diag = torch::full({n, n}, -inf, f32);
  diag.fill_diagonal_(0.0);
  // Self-attention of layer l over `in` (its normed input) at step `step`; returns o_proj's input.
  auto attend = [&](AttentionImpl& at, const torch::Tensor& in, int64_t l, const torch::Tensor& cos, const torch::Tensor& sin,
                    const torch::Tensor& att_mask) {
    const int64_t nh = at.n_heads, nkv = at.n_kv, hd = at.head_dim;
    auto q = at.q_heads(in);
    auto [k, v] = at.kv_heads(in);
    q = apply_rope(q.transpose(0, 1), cos, sin);
    ks[size_t(l)].push_back(apply_rope(k.transpose(0, 1), cos, sin));
    vs[size_t(l)].push_back(v.transpose(0, 1));
    auto K = torch::cat(ks[size_t(l)], 1), V = torch::cat(vs[size_t(l)], 1);
    if (nh != nkv) {
      K = K.repeat_interleave(nh / nkv, 0);
      V = V.repeat_interleave(nh / nkv, 0);
    }
    auto scores = torch::matmul(q, K.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd))) + att_mask;
    return torch::matmul(torch::softmax(scores, -1), V).transpose(0, 1).reshape({n, nh * hd});
  };
  for (int step = 0; step < c.drafts; ++step) {
    auto tok_idx = (t_idx + 1 + step).clamp_max(T - 1);
    auto x = tokens.index({tok_idx});
    auto hn = layer.hidden_norm(feature);
    auto in = torch::cat({layer.input_layernorm(fz.embed.index({x})), hn}, -1);
    auto residual = m->cfg.norm_before_residual ? hn : feature;
    // Mask [n, (step+1) n]: causal over step 0, the diagonal of later steps. With a sliding window
    // W the row of step s at t (position t + s) sees only positions t + s + 1 - W and later: step
    // 0's rows from there, and step i's row at t + i when i >= s + 1 - W.
    const int W = m->cfg.sliding_window;
    std::vector<torch::Tensor> blocks{causal};
    if (W > 0) {
      auto idx = torch::arange(n, torch::TensorOptions(dev).dtype(torch::kInt64));
      blocks[0] = causal.masked_fill(idx.unsqueeze(0) < idx.unsqueeze(1) + (step + 1 - W), -inf);
    }
    for (int i = 1; i <= step; ++i)
      blocks.push_back(W > 0 && i < step + 1 - W ? torch::full({n, n}, -inf, f32) : diag);
    auto att_mask = torch::cat(blocks, 1).to(torch::kFloat32);
    auto [cos, sin] = rope_at(m->inv_freq, t_idx + step);
    auto out = residual + layer.self_attn->o_proj(attend(*layer.self_attn, in, 0, cos, sin, att_mask));
    out = out + layer.mlp(layer.post_attention_layernorm(out));
    for (int64_t l = 1; l < n_layers; ++l) {
      auto& dl = *m->layers[size_t(l)]->as<DraftLayer>();
      out = out + dl.self_attn->o_proj(attend(*dl.self_attn, dl.input_layernorm(out), l, cos, sin, att_mask));
      out = out + dl.mlp(dl.post_attention_layernorm(out));
    }
    auto logits = m->lm_head(m->norm(out));
    if (step_logits) step_logits->push_back(logits.detach().to(torch::kFloat32));
    // Target: the distribution at t + 1 + step predicts x_{t + 2 + step}.
    auto tgt_pos = (t_idx + 1 + step).clamp_max(T - 1);
    auto lab_pos = (t_idx + 2 + step);
    auto valid = (lab_pos < T).to(torch::kFloat32) * mask.index({lab_pos.clamp_max(T - 1)});
    auto p = target_p.index({tgt_pos});
    auto soft_ce = -(p * torch::log_softmax(logits.to(torch::kFloat32), -1)).sum(-1);
    const double vs_sum = valid.sum().item<double>();
    if (vs_sum > 0) total = total + std::pow(0.8, step) * (valid * soft_ce).sum() / vs_sum;
    feature = out;  // the last layer's output feeds the next step
  }
  return total;
}

#ifdef DSPARK_TRAIN_GLOO
using ProcessGroup = c10d::ProcessGroup;

std::shared_ptr<ProcessGroup> make_group(const DrafterTrainConfig& c) {
  if (c.world_size <= 1) return nullptr;
  c10d::TCPStoreOptions opts;
  opts.port = uint16_t(c.master_port);
  opts.isServer = c.rank == 0;
  opts.numWorkers = c.world_size;
  opts.waitWorkers = true;
  opts.timeout = std::chrono::seconds(120);
  auto store = c10::make_intrusive<c10d::TCPStore>(c.master_addr, opts);
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(c.master_addr));
  return std::make_shared<c10d::ProcessGroupGloo>(store, c.rank, c.world_size, options);
}

void all_reduce_sum(ProcessGroup* pg, torch::Tensor& t) {
  if (!pg) return;
  std::vector<at::Tensor> ts{t};
  pg->allreduce(ts)->wait();
}
#else
struct ProcessGroup {};

std::shared_ptr<ProcessGroup> make_group(const DrafterTrainConfig& c) {
  if (c.world_size > 1)
    fail("flag --world-size ", c.world_size, ": this dspark-train was built against libtorch ", TORCH_VERSION,
         " without the gloo process group it uses for data parallelism; train in one process");
  return nullptr;
}

void all_reduce_sum(ProcessGroup*, torch::Tensor&) {}
#endif

// `vocab_from`: a DSpark / DFlash drafter (an --init one) whose draft vocabulary (d2t / t2d, the
// full head kept) the written drafter keeps.
void save_drafter(torch::nn::Module& m, const DrafterConfig& dc, const std::string& dir, int vocab,
                  const std::string& vocab_from = "") {
  fs::create_directories(dir);
  SafetensorsWriter w;
  for (const auto& p : m.named_parameters()) {
    auto t = p.value().detach().to(torch::kCPU, torch::kFloat32).contiguous();
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    w.add_f32(p.key(), shape, t.data_ptr<float>(), t.dim() == 1 ? DType::F32 : DType::BF16);
  }
  std::unique_ptr<TensorStore> vocab_store;  // the views below point into it until write()
  if (!vocab_from.empty() && dc.method != SpecMethod::Eagle3 && dc.draft_vocab_size > 0) {
    vocab_store = TensorStore::open_dir(vocab_from);
    for (const char* name : {"d2t", "t2d"}) {
      const TensorView& t = vocab_store->get(name);
      w.add(name, t.dtype, t.shape, t.data);
    }
  }
  json cfg;
  if (dc.method == SpecMethod::Eagle3) {
    std::vector<int64_t> d2t(size_t(vocab), 0);
    std::vector<uint8_t> t2d(size_t(vocab), 1);
    w.add("d2t", DType::I64, {vocab}, d2t.data());
    w.add("t2d", DType::BOOL, {vocab}, t2d.data());
    json layer = dc.layers.to_json();
    layer.erase("architectures");
    std::vector<int> aux;
    for (int id : dc.target_layer_ids) aux.push_back(id + 1);  // Speculators: input of layer i
    cfg = {{"architectures", {"Eagle3Speculator"}},
           {"speculators_model_type", "eagle3"},
           {"speculators_config",
            {{"algorithm", "eagle3"},
             {"proposal_methods", {{{"proposal_type", "greedy"}, {"speculative_tokens", dc.speculative_tokens}}}}}},
           {"transformer_layer_config", layer},
           {"draft_vocab_size", vocab},
           {"eagle_aux_hidden_state_layer_ids", aux},
           {"norm_before_residual", dc.norm_before_residual}};
    if (dc.sliding_window) cfg["sliding_window"] = dc.sliding_window;
  } else {
    cfg = dc.to_deepspec_json();
  }
  w.write((fs::path(dir) / "model.safetensors").string());
  const std::string text = cfg.dump(2) + "\n";
  write_file_atomic((fs::path(dir) / "config.json").string(), text.data(), text.size());
}

// Every setting a flag gives, checked before any work, each error naming its flag: a batch or
// anchor count of 0 would otherwise "train" on nothing and write a drafter, and nan or inf reach
// libtorch, whose message names no flag.
void check_config(const DrafterTrainConfig& c) {
  auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  auto non_negative = [](double x) { return std::isfinite(x) && x >= 0; };
  if (c.method == SpecMethod::Ngram) fail("flag --method: n-gram needs no training (dspark, dflash or eagle3)");
  if (c.layers < 1 || c.layers > 32) fail("flag --layers must be from 1 to 32 (0: the method's default), got ", c.layers);
  if (c.drafts < 1 || c.drafts > 32) fail("flag --drafts must be from 1 to 32, got ", c.drafts);
  if (c.method == SpecMethod::DSpark) {
    if (c.markov_rank < 0) fail("flag --markov-rank must be at least 0 (0: no Markov head), got ", c.markov_rank);
    if (c.markov_head != "vanilla" && c.markov_head != "gated" && c.markov_head != "rnn")
      fail("flag --markov-head must be vanilla, gated or rnn, got '", c.markov_head, "'");
  }
  if (c.anchors < 1) fail("flag --anchors must be at least 1, got ", c.anchors);
  if (c.steps < 0) fail("flag --steps must be at least 0 (0: from --epochs), got ", c.steps);
  if (c.steps == 0 && c.epochs < 1) fail("flag --epochs must be at least 1, got ", c.epochs);
  if (c.batch < 1) fail("flag --batch must be at least 1, got ", c.batch);
  if (!positive(c.lr)) fail("flag --lr must be a finite number above 0, got ", c.lr);
  if (!(c.warmup_ratio >= 0 && c.warmup_ratio <= 1)) fail("flag --warmup-ratio must be from 0 to 1, got ", c.warmup_ratio);
  if (!(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1)) fail("min_lr_ratio must be from 0 to 1, got ", c.min_lr_ratio);
  if (!non_negative(c.weight_decay)) fail("weight_decay must be a finite number >= 0, got ", c.weight_decay);
  if (!positive(c.clip)) fail("flag --clip must be a finite number above 0, got ", c.clip);
  if (!non_negative(c.ce_weight)) fail("flag --ce must be a finite number >= 0, got ", c.ce_weight);
  if (!non_negative(c.l1_weight)) fail("flag --l1 must be a finite number >= 0, got ", c.l1_weight);
  if (!non_negative(c.conf_weight)) fail("flag --conf must be a finite number >= 0, got ", c.conf_weight);
  if (!positive(c.decay)) fail("flag --decay must be a finite number above 0, got ", c.decay);
  if (!(c.validation_fraction >= 0 && c.validation_fraction < 1))
    fail("flag --validation-fraction must be at least 0 and below 1, got ", c.validation_fraction);
  if (c.threads < 0) fail("flag --threads must be at least 0 (0: libtorch's default), got ", c.threads);
  if (c.save_every < 1) fail("flag --save-every must be at least 1, got ", c.save_every);
  if (!(std::isfinite(c.time_limit) && c.time_limit >= 0))
    fail("flag --time-limit must be a finite number of seconds >= 0 (0: none), got ", c.time_limit);
  if (c.time_limit > 0 && (c.world_size > 1 || c.online.enabled || c.resume))
    fail("flag --time-limit: a run of one process, offline and not resumed (its step count is planned from the "
         "rate it measures)");
  if (c.stop_after == 0 || c.stop_after < -1)
    fail("flag --stop-after must be -1 (run to the end) or at least 1, got ", c.stop_after);
  if (c.world_size < 1) fail("flag --world-size must be at least 1, got ", c.world_size);
  if (c.rank < 0 || c.rank >= c.world_size)
    fail("flag --rank must be from 0 to ", c.world_size - 1, " (--world-size ", c.world_size, "), got ", c.rank);
  if (c.batch % c.world_size != 0)
    fail("flag --batch (", c.batch, ") must be a multiple of --world-size (", c.world_size, ")");
  if (c.world_size > 1 && (c.master_port < 1 || c.master_port > 65535))
    fail("flag --master-port must be from 1 to 65535, got ", c.master_port);
}

// The dataset must be finished and computed from this target: a partial dataset trains on what
// happened to be done, and another target's hidden states train a drafter for the wrong model.
void check_dataset(const HiddenDataset& data, const DrafterTrainConfig& c) {
  const std::string mp = (fs::path(c.data) / "manifest.json").string();
  const json& m = data.manifest();
  if (!m.contains("complete") || m["complete"] != true)
    fail(mp, ": field \"complete\" is ", m.contains("complete") ? m["complete"].dump() : std::string("missing"),
         ": the dataset is unfinished (an interrupted or --limit run of dspark datagen hidden); finish it before "
         "training on --data ", c.data);
  const json target = m.value("target", json::object());
  const std::string recorded = target.is_object() ? target.value("config_crc32", std::string()) : std::string();
  if (!recorded.empty()) {  // datasets written without the target's CRC cannot be checked
    const std::string config = (fs::path(c.target) / "config.json").string();
    const std::string now = crc32_hex(crc32_file(config));
    if (now != recorded)
      fail(mp, ": field \"target.config_crc32\" is ", recorded, " but the --target config ", config, " has CRC32 ",
           now, ": the hidden states were computed from another target; pass that --target or recompute --data");
  }
}

// The online flags, each error naming its flag (main.cpp's ranges, again for library callers).
void check_online_config(const DrafterTrainConfig& c) {
  const OnlineOptions& o = c.online;
  if (!o.enabled) return;
  if (!c.data.empty()) fail("flag --data: not used with --online (the samples come from --servers through --store)");
  if (c.world_size != 1) fail("flag --world-size: --online trains in one process, got ", c.world_size);
  if (o.max_tokens < 1) fail("flag --max-tokens must be at least 1, got ", o.max_tokens);
  if (o.in_flight < 0) fail("flag --in-flight must be at least 0 (0: 2 per server), got ", o.in_flight);
  if (o.queue < 0) fail("flag --queue must be at least 0 (0: 2 x --batch), got ", o.queue);
  if (!(o.sample_timeout > 0) || !std::isfinite(o.sample_timeout))
    fail("flag --sample-timeout must be a finite number of seconds above 0, got ", o.sample_timeout);
  if (!(o.request_timeout > 0) || !std::isfinite(o.request_timeout))
    fail("flag --request-timeout must be a finite number of seconds above 0, got ", o.request_timeout);
  if (o.reload_every < 0) fail("flag --reload-every must be at least 0 (0: off), got ", o.reload_every);
  if (c.init.empty() && c.target_layers.empty())
    fail("flag --target-layers: --online without --init needs the target layers to tap (0-based, e.g. 1,3,4)");
}

// --init: the drafter's config.json gives the shape the flags would (method checked against
// --method, which names it).
void adopt_init_shape(DrafterTrainConfig& c, const DrafterConfig& d) {
  if (d.method != c.method)
    fail("flag --init: ", d.path, " is a ", spec_method_name(d.method), " drafter, but --method is ",
         spec_method_name(c.method));
  c.layers = d.layers.num_layers;
  if (d.method == SpecMethod::DSpark) {
    c.drafts = d.block_size;
    c.markov_rank = d.markov_rank;
    c.markov_head = d.markov_head_type;
    c.confidence = d.confidence_head;
  } else if (d.method == SpecMethod::DFlash) {
    c.drafts = d.block_size - 1;
  }
  if (!c.target_layers.empty() && c.target_layers != d.target_layer_ids)
    fail("flag --target-layers differs from the target_layer_ids of --init ", d.path);
  if (c.sliding_window == 0) c.sliding_window = d.sliding_window;  // kept unless the flag sets one
}

// The --init drafter's config for this target: vocabulary and depth must be the target's.
DrafterConfig init_drafter_config(DrafterConfig d, const Frozen& fz) {
  if (d.num_target_layers && d.num_target_layers != fz.cfg.num_layers)
    fail("flag --init: ", d.path, " was built for a ", d.num_target_layers, "-layer target, --target has ",
         fz.cfg.num_layers);
  if (d.layers.vocab_size != fz.cfg.vocab_size)
    fail("flag --init: ", d.path, " has vocab_size ", d.layers.vocab_size, ", --target has ", fz.cfg.vocab_size);
  if (d.method == SpecMethod::Eagle3 && d.draft_vocab_size > 0 && d.draft_vocab_size != fz.cfg.vocab_size)
    fail("flag --init: ", d.path, " is an EAGLE-3 drafter with a reduced head (draft_vocab_size ",
         d.draft_vocab_size, "); the trainer trains full-vocabulary EAGLE-3 heads");
  if (d.mask_token_id < 0) d.mask_token_id = fz.mask_token;
  d.num_target_layers = fz.cfg.num_layers;
  d.sts_temperatures.clear();  // calibrated for the weights before training: stale after it
  return d;
}

void check_layer_ids(const std::vector<int>& ids, const Frozen& fz, const std::string& what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < -1 || ids[i] >= fz.cfg.num_layers)
      fail(what, ": layer id ", ids[i], " is outside -1..", fz.cfg.num_layers - 1, " (the --target's layers)");
    if (std::count(ids.begin(), ids.end(), ids[i]) > 1) fail(what, ": layer id ", ids[i], " is listed twice");
  }
}

TargetNorm target_norm(const Frozen& fz) {
  TargetNorm n;
  n.num_layers = fz.cfg.num_layers;
  n.hidden = fz.cfg.hidden_size;
  n.eps = fz.cfg.rms_norm_eps;
  const float* w = fz.final_norm.data_ptr<float>();
  n.weight.assign(w, w + fz.final_norm.numel());
  return n;
}

}  // namespace

std::vector<torch::Tensor> eagle3_step_logits(const std::string& drafter_dir, const std::string& target_dir,
                                              const HiddenDataset::Sample& s, int steps, bool bf16) {
  const DrafterConfig dc = DrafterConfig::load(drafter_dir);
  if (dc.method != SpecMethod::Eagle3) fail(drafter_dir, ": not an EAGLE-3 drafter");
  Frozen fz = load_frozen(target_dir);
  const int64_t vocab = dc.draft_vocab_size > 0 ? dc.draft_vocab_size : fz.cfg.vocab_size;
  Eagle3Drafter m(dc, fz.cfg.hidden_size, vocab);
  load_parameters(*m, drafter_dir);
  m->eval();
  torch::NoGradGuard ng;
  DrafterTrainConfig c;
  c.method = SpecMethod::Eagle3;
  c.drafts = steps;
  std::vector<torch::Tensor> out;
  eagle3_sequence_loss(m, fz, to_device(s, torch::kCPU), c, bf16, &out);
  return out;
}

torch::Tensor block_draft_logits(const std::string& drafter_dir, const std::string& target_dir,
                                 const HiddenDataset::Sample& s, int64_t anchor, bool bf16) {
  const DrafterConfig dc = DrafterConfig::load(drafter_dir);
  if (dc.method != SpecMethod::DSpark && dc.method != SpecMethod::DFlash)
    fail(drafter_dir, ": not a DSpark or DFlash drafter");
  Frozen fz = load_frozen(target_dir);
  BlockDrafter m(dc, fz.cfg.hidden_size);
  load_parameters(*m, drafter_dir);
  m->eval();
  torch::NoGradGuard ng;
  auto features = to_device(s, torch::kCPU).hidden.index({Slice(), Slice(0, s.layers)}).reshape({int64_t(s.tokens.size()), -1});
  const std::vector<uint8_t> all(s.tokens.size(), 1);
  Blocks b = build_blocks(s.tokens, all, {anchor}, dc.block_size, dc.mask_token_id,
                          dc.method == SpecMethod::DSpark ? BlockLayout::AnchorFirst : BlockLayout::MaskOnly);
  Bf16Autocast autocast(bf16);
  return block_pass(m, fz, features, b, {anchor}).second;
}

namespace {

// train_drafter's steps, in the order it runs them.

// The run's settings: --init's shape (init_dc: the drafter it starts from), each method's usual
// depth, then the flags checked.
DrafterTrainConfig resolve_config(const DrafterTrainConfig& cfg, std::optional<DrafterConfig>& init_dc) {
  DrafterTrainConfig c = cfg;
  if (!c.init.empty()) {
    init_dc = DrafterConfig::load(c.init);
    adopt_init_shape(c, *init_dc);
  }
  if (c.layers == 0) c.layers = c.method == SpecMethod::Eagle3 ? 1 : 2;  // each method's usual depth
  check_config(c);
  check_online_config(c);
  return c;
}

// A resumed run must train the same drafter on the same data: checked against the run's own
// record before anything is loaded (another method, depth or rank would otherwise surface as a
// tensor error, another --data not at all).
void check_resumed_run(const DrafterTrainConfig& c) {
  std::vector<ResumeField> fields = {{"method", "--method"}, {"target", "--target", true}, {"data", "--data", true},
                                     {"layers", "--layers"}, {"drafts", "--drafts"}};
  if (c.method == SpecMethod::DSpark)
    fields.insert(fields.end(), {{"markov_rank", "--markov-rank"}, {"markov_head", "--markov-head"},
                                 {"confidence", "--no-confidence"}});
  fields.push_back({"sliding_window", "--sliding-window"});
  fields.insert(fields.end(), {{"init", "--init", true}, {"online", "--online"}, {"prompts", "--prompts", true},
                               {"store", "--store"}, {"max_tokens", "--max-tokens"},
                               {"target_layers", "--target-layers"}});
  check_resume_config(c.out, latest_checkpoint_config(c.out), c.to_json(), fields);
}

// The training data (none online) and the target layers the drafter taps (layer_ids). Online and
// regenerated data tap the layers --init or --target-layers name; a dataset holds its own.
std::optional<DrafterData> open_training_data(const DrafterTrainConfig& c,
                                              const std::optional<DrafterConfig>& init_dc, const Frozen& fz,
                                              const torch::Device& device, std::vector<int>& layer_ids) {
  const bool online = c.online.enabled;
  const bool regenerated = !online && DrafterData::is_regenerated(c.data);
  if (online || regenerated) {
    layer_ids = init_dc ? init_dc->target_layer_ids : c.target_layers;
    if (layer_ids.empty())
      fail("flag --target-layers: --data ", c.data, " is regenerated data (a JSONL file, not a hidden-state dataset) "
           "and there is no --init; name the target layers to tap (0-based, e.g. 1,3,4)");
    check_layer_ids(layer_ids, fz, init_dc ? "flag --init " + init_dc->path : std::string("flag --target-layers"));
  } else if (!c.target_layers.empty()) {
    fail("flag --target-layers: the hidden-state dataset --data ", c.data, " holds its own layers");
  }
  std::optional<DrafterData> data;
  if (!online) data = DrafterData::open(c.data, c.target, layer_ids, device);
  if (const HiddenDataset* ds = data ? data->dataset() : nullptr) {
    check_dataset(*ds, c);
    if (ds->hidden_size() != fz.cfg.hidden_size)
      fail(c.data, ": hidden size ", ds->hidden_size(), " differs from the --target's ", fz.cfg.hidden_size);
    for (int id : ds->layer_ids())
      if (id >= fz.cfg.num_layers)
        fail(c.data, ": layer id ", id, " is past the --target's ", fz.cfg.num_layers, " layers");
    layer_ids = ds->layer_ids();
    if (init_dc && init_dc->target_layer_ids != layer_ids)
      fail("flag --init: ", init_dc->path, " taps other target layers than --data ", c.data, " holds");
  }
  return data;
}

// Where each step's samples come from: the dataset (shuffled epochs, a validation tail), or the
// online stream (each prompt's sample once; --steps defaults to prompts / batch).
struct SamplePlan {
  size_t n_total = 0, n_val = 0, n_train = 0;  // the dataset's samples (none online)
  int64_t total_steps = 0;
};

SamplePlan plan_dataset_steps(const DrafterData& data, const DrafterTrainConfig& c) {
  SamplePlan p;
  p.n_total = data.size();
  p.n_val = std::min(p.n_total / 2, size_t(std::ceil(double(p.n_total) * c.validation_fraction)));
  p.n_train = p.n_total - p.n_val;
  if (p.n_train == 0) fail(c.data, ": no training samples");
  const int64_t steps_per_epoch = std::max<int64_t>(1, int64_t(p.n_train) / c.batch);
  p.total_steps = c.steps > 0 ? c.steps : steps_per_epoch * c.epochs;
  return p;
}

// The drafter being trained: a block drafter (DSpark, DFlash) or an EAGLE-3 one, and the module
// both are.
struct TrainedDrafter {
  std::shared_ptr<torch::nn::Module> module;
  BlockDrafter block{nullptr};
  Eagle3Drafter eagle{nullptr};
};

// Initialized from the seed, or with --init's weights (errors name the tensor and the file), on
// the device.
TrainedDrafter make_trained_drafter(const DrafterTrainConfig& c, const DrafterConfig& dc, const Frozen& fz,
                                    bool from_init, const torch::Device& device) {
  TrainedDrafter d;
  if (c.method == SpecMethod::Eagle3) {
    d.eagle = Eagle3Drafter(dc, fz.cfg.hidden_size, fz.cfg.vocab_size);
    d.module = d.eagle.ptr();
  } else {
    d.block = BlockDrafter(dc, fz.cfg.hidden_size);
    d.module = d.block.ptr();
  }
  init_weights(*d.module, c.seed);
  if (from_init) load_parameters(*d.module, c.init);
  d.module->to(device);
  return d;
}

// One sample's loss (undefined when it supervises nothing); `anchor_seed` draws a block
// drafter's anchors.
torch::Tensor sequence_loss(TrainedDrafter& d, const Frozen& fz, const TrainSample& s, const DrafterTrainConfig& c,
                            bool bf16, uint64_t anchor_seed) {
  return c.method == SpecMethod::Eagle3 ? eagle3_sequence_loss(d.eagle, fz, s, c, bf16)
                                        : block_sequence_loss(d.block, fz, s, c, bf16, anchor_seed, nullptr);
}

// The progress line and train_log.jsonl (lead process only); a new run logs its start.
std::unique_ptr<Progress> start_progress(const DrafterTrainConfig& c, const SamplePlan& plan, bool bf16,
                                         torch::nn::Module& module) {
  auto progress = std::make_unique<Progress>(plan.total_steps, (fs::path(c.out) / "train_log.jsonl").string(), c.resume);
  if (!c.resume)
    progress->event({{"event", "start"}, {"method", spec_method_name(c.method)}, {"train_samples", plan.n_train},
                     {"validation_samples", plan.n_val}, {"steps", plan.total_steps}, {"world_size", c.world_size},
                     {"precision", bf16 ? "bf16" : "f32"}, {"online", c.online.enabled}, {"init", c.init},
                     {"trainable_parameters", [&] {
                        int64_t p = 0;
                        for (auto& t : module.parameters()) p += t.numel();
                        return p;
                      }()}});
  return progress;
}

// Epoch e visits the training samples in an order shuffled by (seed, e): the sample index of the
// run's `global`-th draw, and its epoch.
std::pair<size_t, uint64_t> shuffled_sample(int64_t global, size_t n_train, uint64_t seed) {
  const int64_t epoch = global / int64_t(n_train), i = global % int64_t(n_train);
  std::vector<size_t> order(n_train);
  for (size_t k = 0; k < n_train; ++k) order[k] = k;
  Rng r(seed, uint64_t(epoch) + 1000);
  for (size_t k = n_train - 1; k > 0; --k) std::swap(order[k], order[size_t(r.next() % (k + 1))]);
  return std::make_pair(order[size_t(i)], uint64_t(epoch));
}

// This process's share of one step: its samples' losses, each divided by the batch and
// backpropagated.
struct RankBatch {
  double loss = 0;  // sum of the losses / batch
  int64_t tokens = 0;
  int taken = 0;                  // samples taken (online: fewer, or none, at the stream's end)
  std::vector<OnlineItem> items;  // online: where this step's samples came from (no tensors)
};

RankBatch backward_rank_batch(TrainedDrafter& d, const Frozen& fz, const DrafterTrainConfig& c, bool bf16,
                              int64_t step, int per_rank, OnlineSource* src, const DrafterData* data,
                              size_t n_train, const torch::Device& device) {
  RankBatch b;
  for (int i = 0; i < per_rank; ++i) {
    TrainSample s;
    uint64_t anchor_seed;
    if (src) {
      std::optional<OnlineItem> it = src->pop();
      if (!it) break;
      s = to_device(std::move(it->sample), device);
      anchor_seed = c.seed * 1000003ull + uint64_t(it->prompt) * 7919ull;
      b.items.push_back(std::move(*it));
    } else {
      const int64_t global = step * c.batch + int64_t(c.rank) * per_rank + i;
      auto [idx, epoch] = shuffled_sample(global, n_train, c.seed);
      s = data->load(idx);
      anchor_seed = c.seed * 1000003ull + idx * 7919ull + epoch;
    }
    ++b.taken;
    b.tokens += int64_t(s.tokens.size());
    torch::Tensor loss = sequence_loss(d, fz, s, c, bf16, anchor_seed);
    if (!loss.defined()) continue;
    (loss / double(c.batch)).backward();
    b.loss += loss.item<double>() / double(c.batch);
  }
  return b;
}

// Averages gradients over processes (each holds sum_i loss_i / batch of its share). The
// stream's last, short step first takes the mean over the samples it has.
void reduce_gradients(torch::nn::Module& module, ProcessGroup* pg, RankBatch& b, int per_rank) {
  if (b.taken < per_rank) {
    const double scale = double(per_rank) / double(b.taken);
    for (auto& p : module.parameters())
      if (p.grad().defined()) p.mutable_grad().mul_(scale);
    b.loss *= scale;
  }
  for (auto& p : module.parameters()) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    all_reduce_sum(pg, p.mutable_grad());
  }
}

// The step log's memory fields: the tensor cache (train/caching_allocator.h), to tell a growing
// cache from a leak, glibc's heap and the resident set. `before`: the cache's counts at the last
// step.
void add_memory_fields(json& fields, CachingAllocatorStats& before) {
  const CachingCpuAllocator* a = CachingCpuAllocator::installed();
  if (!a) return;
  const CachingAllocatorStats s = a->stats();
  auto mib = [](std::size_t b) { return std::round(double(b) / double(1 << 20) * 10) / 10; };
  fields["tensor_mib"] = {{"live", mib(s.live_bytes)}, {"cached", mib(s.cached_bytes)},
                          {"peak_live", mib(s.peak_live_bytes)}};
  // This step's requests of cached sizes, and how many the cache served.
  fields["tensor_blocks"] = {{"requests", s.allocations - before.allocations},
                             {"reused", s.reused - before.reused},
                             {"evicted", s.evicted - before.evicted}};
  before = s;
  // glibc's heap: in use and free but kept (blocks below the mmap threshold, main.cpp), and
  // mapped blocks (the tensor cache's, live and cached, among them).
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  const struct mallinfo2 mi = mallinfo2();
  fields["heap_mib"] = {{"used", mib(mi.uordblks)}, {"free", mib(mi.fordblks)},
                        {"mmapped", mib(mi.hblkhd)}};
#endif
  // Resident memory at the same point of every step, after its tensors are freed: within a
  // step it rises by the part of the working set the cache did not hold (the sample's
  // length decides), so samples taken from outside at random times swing by that much.
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long long size = 0, resident = 0;
    if (std::fscanf(f, "%llu %llu", &size, &resident) == 2)
      fields["rss_mib"] = mib(std::size_t(resident) * std::size_t(sysconf(_SC_PAGESIZE)));
    std::fclose(f);
  }
}

// --time-limit: once kTimePlanSteps steps ran, the run takes the steps that fit at their rate,
// and the learning-rate schedule spans those.
constexpr int64_t kTimePlanSteps = 20;

void fit_time_limit(const DrafterTrainConfig& c, int64_t step, int64_t run_steps, double loop_start,
                    int64_t& total_steps, LrSchedule& sched, Progress* progress) {
  if (c.time_limit <= 0 || run_steps != kTimePlanSteps) return;
  const double spent = now_seconds() - loop_start, per_step = spent / double(run_steps);
  const int64_t fit = step + int64_t(std::max(0.0, c.time_limit - spent) / per_step);
  if (fit >= total_steps) return;
  total_steps = std::max(step, fit);
  sched.total_steps = total_steps;
  sched.warmup_steps = int64_t(std::ceil(c.warmup_ratio * double(total_steps)));
  if (progress) {
    progress->set_total(total_steps);
    progress->event({{"event", "time_limit"}, {"seconds", c.time_limit}, {"seconds_per_step", per_step},
                     {"steps", total_steps}});
  }
}

// The end of a finished run (lead process): the validation loss on the held-out samples
// (offline), the drafter written to OUT/drafter, and the "done" event; online, the stream is
// stopped complete first.
void finish_run(TrainedDrafter& d, const DrafterConfig& dc, const Frozen& fz, const DrafterTrainConfig& c, bool bf16,
                const SamplePlan& plan, const DrafterData* data, OnlineSource* src, Progress& progress, int64_t step) {
  torch::NoGradGuard ng;
  d.module->eval();
  double vsum = 0;
  int vcount = 0;
  for (size_t i = plan.n_train; i < plan.n_total; ++i) {
    TrainSample s = data->load(i);
    torch::Tensor loss = sequence_loss(d, fz, s, c, bf16, c.seed + i);
    if (!loss.defined()) continue;
    vsum += loss.item<double>();
    ++vcount;
  }
  save_drafter(*d.module, dc, (fs::path(c.out) / "drafter").string(), fz.cfg.vocab_size, c.init);
  json done = {{"event", "done"}, {"step", step}, {"drafter", (fs::path(c.out) / "drafter").string()}};
  if (!src) done["validation_loss"] = vcount ? vsum / vcount : 0.0;
  if (src) {
    src->stop(/*complete=*/true);  // and the sweep: nothing of this run stays in the store
    done["online"] = src->summary();
  }
  progress.event(done);
  progress.finish();
}

}  // namespace

double train_drafter(const DrafterTrainConfig& cfg) {
  std::optional<DrafterConfig> init_dc;
  const DrafterTrainConfig c = resolve_config(cfg, init_dc);
  const bool online = c.online.enabled;
  const torch::Device device = training_device(c.device);
  if (c.resume && !device.is_cpu())
    fail("flag --resume: resuming on --device ", c.device, " is not supported (the optimizer state loads on the CPU); "
         "resume with --device cpu or start a new run");
  const bool bf16 = use_bf16(c.precision, device);
  const bool lead = c.rank == 0;
  if (c.resume) check_resumed_run(c);
  if (lead && !precision_note(c.precision).empty()) std::fprintf(stderr, "%s\n", precision_note(c.precision).c_str());
  if (c.threads > 0) at::set_num_threads(c.threads);
  torch::manual_seed(c.seed);
  Frozen fz = load_frozen(c.target);
  fz.embed = fz.embed.to(device);
  fz.lm_head = fz.lm_head.to(device);
  std::vector<int> layer_ids;
  std::optional<DrafterData> data = open_training_data(c, init_dc, fz, device, layer_ids);
  const DrafterConfig dc = init_dc ? init_drafter_config(*init_dc, fz) : drafter_config(c, fz, layer_ids);

  std::unique_ptr<OnlineSource> src;
  SamplePlan plan;
  if (data) {
    plan = plan_dataset_steps(*data, c);
  } else {
    src = std::make_unique<OnlineSource>(c.online, c.out, c.target, target_norm(fz), layer_ids, c.batch);
    plan.total_steps = c.steps > 0 ? c.steps : std::max<int64_t>(1, src->prompt_count() / c.batch);
  }
  int64_t& total_steps = plan.total_steps;

  TrainedDrafter d = make_trained_drafter(c, dc, fz, init_dc.has_value(), device);
  torch::nn::Module& module = *d.module;
  torch::optim::AdamW opt(module.parameters(),
                          torch::optim::AdamWOptions(c.lr).betas({0.9, 0.999}).eps(1e-8).weight_decay(c.weight_decay));
  LrSchedule sched{c.lr, int64_t(std::ceil(c.warmup_ratio * double(total_steps))), total_steps, c.min_lr_ratio};
  auto pg = make_group(c);

  fs::create_directories(c.out);
  // An online run that crashed before its first checkpoint resumes from its journal alone, with
  // the starting weights.
  const bool load = c.resume && (!online || latest_checkpoint(c.out));
  const CheckpointState st = start_or_resume(c.out, load, /*refuse_existing=*/lead, module, opt);
  int64_t step = st.step, tokens = st.tokens;
  std::unique_ptr<Progress> progress;
  if (lead) progress = start_progress(c, plan, bf16, module);
  // Stops the stream's workers before `progress`, which they log to, goes (an error unwinding).
  struct StopFirst {
    OnlineSource* s;
    ~StopFirst() {
      if (s) s->stop(false);
    }
  } stop_first{src.get()};
  if (src) {
    Progress* pr = progress.get();
    src->start(c.resume, st.extra.is_object() ? st.extra.value("online_state", json()) : json(), (total_steps - step) * c.batch,
               [pr](const json& e) { pr->event(e); });
  }
  const int per_rank = c.batch / c.world_size;
  double last = 0;
  int64_t run_steps = 0, saved_step = st.step;
  bool exhausted = false, stopped = false;
  // The checkpoint of `step`; online, with the prompts trained so far, then their samples leave the
  // store, then (every --reload-every steps) the servers load the drafter.
  auto checkpoint = [&] {
    // Hand glibc's free heap pages back to the kernel, once per checkpoint (a few ms). Tensors
    // under the cache's 256 KiB and the checkpoints' own temporaries come and go in sizes that
    // follow the samples, and the free chunks between live ones stayed resident: the heap's free
    // bytes grew 21 -> 34 MiB over 25 minutes of the demo's online soak (main.cpp's trim threshold
    // keeps glibc from trimming on its own, which would cost every step).
    malloc_trim(0);
    json extra = c.to_json();
    if (src) extra["online_state"] = src->checkpoint_state();
    save_checkpoint(c.out, module, opt, CheckpointState{step, tokens, extra});
    saved_step = step;
    if (!src) return;
    src->checkpoint_saved();
    if (c.online.reload_every > 0 && step % c.online.reload_every == 0) {
      const fs::path dir = fs::absolute(fs::path(c.out) / ("drafter-step-" + std::to_string(step)));
      save_drafter(module, dc, dir.string(), fz.cfg.vocab_size, c.init);
      progress->event({{"event", "reload"}, {"step", step}, {"path", dir.string()},
                       {"answers", src->reload_drafter(dir.string())}});
    }
  };
  module.train();
  CachingAllocatorStats alloc_before;  // for each step's tensor_blocks
  if (const CachingCpuAllocator* a = CachingCpuAllocator::installed()) alloc_before = a->stats();
  const double loop_start = now_seconds();
  while (step < total_steps) {
    const double lr = sched.at(step);
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    opt.zero_grad();
    RankBatch b = backward_rank_batch(d, fz, c, bf16, step, per_rank, src.get(), data ? &*data : nullptr,
                                      plan.n_train, device);
    if (b.taken == 0) {  // online: every prompt is trained, failed or not needed
      exhausted = true;
      break;
    }
    reduce_gradients(module, pg.get(), b, per_rank);
    auto stats = torch::tensor({b.loss, double(b.tokens)}, torch::kFloat64);
    all_reduce_sum(pg.get(), stats);
    const double grad_norm = torch::nn::utils::clip_grad_norm_(module.parameters(), c.clip);
    opt.step();
    last = stats[0].item<double>();
    tokens += int64_t(stats[1].item<double>());
    for (const OnlineItem& it : b.items) src->trained(it, step + 1);
    if (lead) {
      json fields = {{"loss", last}, {"lr", lr}, {"grad_norm", grad_norm}};
      add_memory_fields(fields, alloc_before);
      if (src) {
        fields.update(src->step_fields());
        fields["samples"] = b.taken;
        progress->set_status(src->status_line());
      }
      progress->step(step, tokens, fields);
    }
    ++step;
    ++run_steps;
    fit_time_limit(c, step, run_steps, loop_start, total_steps, sched, lead ? progress.get() : nullptr);
    const bool stop_now = run_steps == c.stop_after;
    if (lead && (step % c.save_every == 0 || step == total_steps || stop_now)) checkpoint();
    if (stop_now) {
      stopped = step < total_steps;
      break;
    }
  }
  const bool finished = !stopped && (step == total_steps || exhausted);
  if (lead && src && finished && saved_step != step) checkpoint();
  if (lead && finished && (src || step == total_steps))
    finish_run(d, dc, fz, c, bf16, plan, data ? &*data : nullptr, src.get(), *progress, step);
  if (src) src->stop(false);
  return last;
}

}  // namespace dspark::train

#include "train/lm_trainer.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/crc32.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "core/timer.h"
#include "data/token_shards.h"
#include "core/rng.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/precision.h"
#include "train/progress.h"
#include "train/qwen3_model.h"
#include "train/schedule.h"

namespace dspark::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

json LmTrainConfig::to_json() const {
  return {{"model", model.to_json()}, {"init_from", init_from}, {"tokenizer", tokenizer}, {"data", data},
          {"domains", domains}, {"out", out}, {"steps", steps}, {"batch", batch}, {"accum", accum},
          {"seq_len", seq_len}, {"lr", lr}, {"min_lr_ratio", min_lr_ratio}, {"warmup", warmup},
          {"weight_decay", weight_decay}, {"beta1", beta1}, {"beta2", beta2}, {"eps", eps}, {"clip", clip},
          {"init_std", init_std}, {"seed", seed}, {"precision", precision}, {"eval_every", eval_every},
          {"eval_windows", eval_windows}, {"save_every", save_every}};
}

namespace {

// Samples the micro-batch for (step, micro): rows of seq_len + 1 tokens at positions drawn
// from a generator seeded by the step, so a resumed run sees exactly the same data.
torch::Tensor sample_batch(const TokenShards& data, const LmTrainConfig& c, int64_t step, int micro) {
  const int64_t span = c.seq_len + 1;
  if (data.size() <= span) fail(c.data, ": the training split has only ", data.size(), " tokens, fewer than one window of ", span);
  auto batch = torch::empty({c.batch, span}, torch::kInt32);
  auto* p = batch.data_ptr<int32_t>();
  for (int r = 0; r < c.batch; ++r) {
    Rng rng(c.seed, uint64_t((step * c.accum + micro) * c.batch + r));
    const int64_t start = int64_t(rng.next() % uint64_t(data.size() - span));
    data.copy(start, span, p + int64_t(r) * span);
  }
  return batch.to(torch::kInt64);
}

torch::Tensor lm_loss(CausalLM& model, const torch::Tensor& batch, bool bf16) {
  using torch::indexing::Slice;
  auto inputs = batch.index({Slice(), Slice(0, -1)});
  auto targets = batch.index({Slice(), Slice(1, torch::indexing::None)});
  torch::Tensor logits;
  {
    Bf16Autocast autocast(bf16);
    logits = model->forward(inputs).logits;
  }
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32),
                                              targets.reshape({-1}));
}

void check_tokenizer_matches(const LmTrainConfig& c, const TokenShards& data) {
  const uint32_t crc = crc32_file(c.tokenizer);
  if (data.tokenizer_crc() != crc)
    fail(c.tokenizer, ": is not the tokenizer the corpus in ", c.data,
         " was tokenized with (CRC32 differs); retokenize or pass the matching tokenizer");
  auto tok = Tokenizer::from_file(c.tokenizer);
  if (tok->vocab_size() > c.model.vocab_size)
    fail(c.tokenizer, ": has ", tok->vocab_size(), " tokens but the model's vocab_size is ", c.model.vocab_size);
}

// Every setting a flag gives, checked before any work, each error naming its flag (nan or inf
// would otherwise reach libtorch, whose message names none).
void check_config(const LmTrainConfig& c) {
  auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  auto non_negative = [](double x) { return std::isfinite(x) && x >= 0; };
  if (c.steps < 1) fail("flag --steps must be at least 1, got ", c.steps);
  if (c.batch < 1) fail("flag --batch must be at least 1, got ", c.batch);
  if (c.accum < 1) fail("flag --accum must be at least 1, got ", c.accum);
  if (c.seq_len < 2) fail("flag --seq-len must be at least 2, got ", c.seq_len);
  if (c.seq_len > c.model.max_position_embeddings)
    fail("flag --seq-len ", c.seq_len, " exceeds the model's max_position_embeddings ", c.model.max_position_embeddings);
  if (!positive(c.lr)) fail("flag --lr must be a finite number above 0, got ", c.lr);
  if (!(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1)) fail("flag --min-lr-ratio must be from 0 to 1, got ", c.min_lr_ratio);
  if (c.warmup < 0) fail("flag --warmup must be at least 0, got ", c.warmup);
  if (!non_negative(c.weight_decay)) fail("flag --weight-decay must be a finite number >= 0, got ", c.weight_decay);
  if (!positive(c.clip)) fail("flag --clip must be a finite number above 0, got ", c.clip);
  if (!non_negative(c.init_std)) fail("flag --init-std must be a finite number >= 0, got ", c.init_std);
  if (!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1))
    fail("AdamW betas must be in [0, 1), got ", c.beta1, " and ", c.beta2);
  if (!positive(c.eps)) fail("AdamW eps must be a finite number above 0, got ", c.eps);
  if (c.threads < 0) fail("flag --threads must be at least 0 (0: libtorch's default), got ", c.threads);
  if (c.eval_every < 0) fail("flag --eval-every must be at least 0 (0: never), got ", c.eval_every);
  if (c.eval_windows < 1) fail("flag --eval-windows must be at least 1, got ", c.eval_windows);
  if (c.save_every < 1) fail("flag --save-every must be at least 1, got ", c.save_every);
  if (c.stop_after == 0 || c.stop_after < -1)
    fail("flag --stop-after must be -1 (run to the end) or at least 1, got ", c.stop_after);
}

}  // namespace

std::unique_ptr<torch::optim::AdamW> build_optimizer(CausalLM& model, const LmTrainConfig& c) {
  // Decoupled weight decay on matrices only (not on norm weights).
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto opts = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, opts(c.weight_decay));
  groups.emplace_back(no_decay, opts(0.0));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(c.lr));
}

double train_lm(const LmTrainConfig& c) {
  const double process_start = now_seconds();
  check_config(c);
  const bool bf16 = use_bf16(c.precision);
  // A resumed run must train the same model on the same data: checked against the run's record
  // before any tensor is loaded (another config would surface as a shape error, other data not at all).
  if (c.resume)
    check_resume_config(c.out, latest_checkpoint_config(c.out), c.to_json(),
                        {{"model", "--config"}, {"data", "--data", true}, {"domains", "--domains"}});
  if (!precision_note(c.precision).empty()) std::fprintf(stderr, "%s\n", precision_note(c.precision).c_str());
  if (c.threads > 0) at::set_num_threads(c.threads);
  torch::manual_seed(c.seed);
  TokenShards train = TokenShards::open(c.data, "train", c.domains);
  check_tokenizer_matches(c, train);

  CausalLM model(c.model);
  model->init_weights(c.init_std, c.seed);
  if (!c.init_from.empty()) load_hf_weights(model, c.init_from);

  auto opt_ptr = build_optimizer(model, c);
  torch::optim::AdamW& opt = *opt_ptr;
  LrSchedule sched{c.lr, c.warmup, c.steps, c.min_lr_ratio};

  fs::create_directories(c.out);
  std::string resumed_from;
  const CheckpointState st = start_or_resume(c.out, c.resume, true, *model, opt, &resumed_from);
  int64_t step = st.step, tokens = st.tokens;
  if (c.resume) std::fprintf(stderr, "resumed from %s at step %ld\n", resumed_from.c_str(), long(step));
  const std::string cfg_text = c.to_json().dump(2) + "\n";
  write_file_atomic((fs::path(c.out) / "train_config.json").string(), cfg_text.data(), cfg_text.size());

  Progress progress(c.steps, (fs::path(c.out) / "train_log.jsonl").string(), c.resume);
  if (!c.resume)
    progress.event({{"event", "start"}, {"parameters", model->num_parameters()}, {"precision", bf16 ? "bf16" : "f32"},
                    {"threads", at::get_num_threads()}, {"train_tokens", train.size()}});
  double last_loss = 0;
  int64_t run_steps = 0;
  auto checkpoint = [&] {
    save_checkpoint(c.out, *model, opt, CheckpointState{step, tokens, c.to_json()});
  };
  model->train();
  while (step < c.steps) {
    const double lr = sched.at(step);
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    opt.zero_grad();
    double loss_sum = 0;
    for (int m = 0; m < c.accum; ++m) {
      auto batch = sample_batch(train, c, step, m);
      auto loss = lm_loss(model, batch, bf16) / double(c.accum);
      loss.backward();
      loss_sum += loss.item<double>();
      tokens += int64_t(c.batch) * c.seq_len;
    }
    const double grad_norm = torch::nn::utils::clip_grad_norm_(model->parameters(), c.clip);
    opt.step();
    last_loss = loss_sum;
    progress.step(step, tokens, {{"loss", loss_sum}, {"lr", lr}, {"grad_norm", grad_norm}});
    ++step;
    ++run_steps;
    if (step % c.save_every == 0 || step == c.steps || run_steps == c.stop_after) checkpoint();
    if (c.eval_every > 0 && (step % c.eval_every == 0 || step == c.steps)) {
      torch::NoGradGuard ng;
      model->eval();
      json losses;
      for (const auto& [domain, n] : train.domain_sizes()) {
        TokenShards val = TokenShards::open(c.data, "validation", {domain});
        double sum = 0;
        int count = 0;
        const int64_t span = c.seq_len + 1;
        for (int w = 0; w < c.eval_windows && val.size() > span; ++w) {
          const int64_t start = (val.size() - span) * w / std::max(1, c.eval_windows);
          auto win = torch::empty({1, span}, torch::kInt32);
          val.copy(start, span, win.data_ptr<int32_t>());
          sum += lm_loss(model, win.to(torch::kInt64), bf16).item<double>();
          ++count;
        }
        if (count) losses[domain] = sum / count;
      }
      progress.event({{"event", "eval"}, {"step", step}, {"validation_loss", losses}});
      model->train();
    }
    if (run_steps == c.stop_after) break;
  }
  progress.finish();
  if (step == c.steps) {
    save_hf(model, (fs::path(c.out) / "model").string(), DType::BF16, c.tokenizer);
    // process_s: this process from start-up to the saved model (the whole run when not resumed),
    // including step 0, evaluations and checkpoints, which the per-step elapsed_s leaves out.
    progress.event({{"event", "done"},
                    {"step", step},
                    {"model", (fs::path(c.out) / "model").string()},
                    {"process_s", now_seconds() - process_start}});
  }
  return last_loss;
}

json evaluate_lm(const std::string& model_dir, const std::string& data, const std::string& split, int windows,
                 int seq_len) {
  if (windows < 1) fail("flag --windows must be at least 1, got ", windows);
  if (seq_len < 1) fail("flag --seq-len must be at least 1, got ", seq_len);
  ModelConfig mc = ModelConfig::from_dir(model_dir);
  if (seq_len > mc.max_position_embeddings)
    fail("flag --seq-len ", seq_len, " exceeds ", model_dir, "'s max_position_embeddings ", mc.max_position_embeddings);
  CausalLM model(mc);
  load_hf_weights(model, model_dir);
  model->eval();
  torch::NoGradGuard ng;
  TokenShards all = TokenShards::open(data, split);
  json out;
  for (const auto& [domain, n] : all.domain_sizes()) {
    TokenShards d = TokenShards::open(data, split, {domain});
    const int64_t span = seq_len + 1;
    double sum = 0;
    int count = 0;
    for (const int64_t start : d.window_starts(span, windows)) {
      auto win = torch::empty({1, span}, torch::kInt32);
      d.copy(start, span, win.data_ptr<int32_t>());
      sum += lm_loss(model, win.to(torch::kInt64), false).item<double>();
      ++count;
    }
    if (count) out[domain] = {{"loss", sum / count}, {"perplexity", std::exp(sum / count)}, {"windows", count}};
  }
  return out;
}

}  // namespace dspark::train

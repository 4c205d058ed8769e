// dspark-train: the training binary (linked with libtorch; the engine never is).
// Reached as `dspark train <command>`.
#include <torch/torch.h>

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "core/flags.h"
#include "core/mmap_file.h"
#include "core/timer.h"
#include "train/caching_allocator.h"
#include "train/drafter_trainer.h"
#include "train/lm_trainer.h"

namespace dspark::train {
namespace {

// --precision of both trainers (train/precision.h resolves it).
constexpr const char* kPrecisionHelp = "auto, f32 or bf16 (autocast; auto = bf16 only where the CPU has AMX/AVX512-BF16)";

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// Flag ranges. Values stored in int stay inside int, so int(a.integer(...)) never narrows.
constexpr int64_t kMaxBatch = 1 << 20;        // sequences per (micro-)batch
constexpr int64_t kMaxSeqLen = 1 << 24;       // tokens per sequence (seq_len + 1 must fit int)
constexpr int64_t kMaxDraftLayers = 32;       // train_drafter's own limits
constexpr int64_t kMaxDrafts = 32;
constexpr int64_t kMaxMarkovRank = 1 << 16;
constexpr int64_t kMaxProcesses = 1 << 16;
constexpr int64_t kMaxMatmulDim = 1 << 16;
constexpr double kTinyPositive = 1e-12;       // "> 0" for rates, clipping norms and decays
constexpr double kMaxWeight = 1e12;           // loss weights, decays, clip norms: finite, not absurd

// --lr: positive and finite (0, nan or inf would reach libtorch, or train nothing, unnamed).
double learning_rate(const Args& a) { return a.number("lr", kTinyPositive, 10.0); }

// --threads: 0 is libtorch's default.
int threads(const Args& a) { return int(a.integer("threads", 0, 1024)); }

// --stop-after: -1 (run to the end) or a positive number of steps; 0 would silently run to the end.
int64_t stop_after(const Args& a) {
  const int64_t n = a.integer("stop-after", -1, kFlagInt64Max);
  if (n == 0) fail("flag --stop-after must be -1 (run to the end) or at least 1, got 0");
  return n;
}

int cmd_lm(int argc, char** argv) {
  Args a;
  a.flag("config", "model config.json (HF fields: architectures, hidden_size, ...)")
      .flag("init", "start from the weights of this HF model directory")
      .flag("tokenizer", "tokenizer.json the corpus was tokenized with")
      .flag("data", "tokenized corpus directory (dspark corpus tokenize)")
      .flag("domains", "comma-separated domains to train on (default: all)")
      .flag("out", "run directory (checkpoints, train_log.jsonl, model/)")
      .flag("steps", "optimizer steps", true, "1000")
      .flag("batch", "sequences per micro-batch", true, "8")
      .flag("accum", "micro-batches per optimizer step", true, "1")
      .flag("seq-len", "tokens per sequence", true, "512")
      .flag("lr", "peak learning rate", true, "1e-3")
      .flag("min-lr-ratio", "final learning rate as a fraction of the peak", true, "0.1")
      .flag("warmup", "linear warmup steps", true, "100")
      .flag("weight-decay", "AdamW decoupled weight decay (matrices only)", true, "0.1")
      .flag("clip", "gradient norm clipping", true, "1.0")
      .flag("init-std", "standard deviation of initial weights", true, "0.02")
      .flag("seed", "seed for initialisation and data order", true, "1234")
      .flag("precision", kPrecisionHelp, true, "auto")
      .flag("threads", "compute threads (0: libtorch's default)", true, "0")
      .flag("eval-every", "steps between validation evaluations (0: never)", true, "200")
      .flag("eval-windows", "validation windows per domain", true, "16")
      .flag("save-every", "steps between checkpoints", true, "200")
      .flag("stop-after",
            "stop after this many steps of this run, with a checkpoint (-1: run to the end)", true,
            "-1")
      .flag("resume", "continue the run in --out from its latest checkpoint", false);
  if (!a.parse(argc, argv, "train lm",
               "Trains a Qwen3/Llama target model on a tokenized corpus and "
               "writes\nOUT/model, an HF directory the engine loads."))
    return 0;
  LmTrainConfig c;
  if (auto i = a.opt("init")) c.init_from = *i;
  c.tokenizer = a.str("tokenizer");
  c.data = a.str("data");
  if (auto d = a.opt("domains")) c.domains = split_list(*d);
  c.out = a.str("out");
  c.steps = a.integer("steps", 1, kFlagInt64Max);
  c.batch = int(a.integer("batch", 1, kMaxBatch));
  c.accum = int(a.integer("accum", 1, kMaxBatch));
  c.seq_len = int(a.integer("seq-len", 2, kMaxSeqLen));
  c.lr = learning_rate(a);
  c.min_lr_ratio = a.number("min-lr-ratio", 0, 1);
  c.warmup = a.integer("warmup", 0, kFlagInt64Max);
  c.weight_decay = a.number("weight-decay", 0, kMaxWeight);
  c.clip = a.number("clip", kTinyPositive, kMaxWeight);
  c.init_std = a.number("init-std", 0, kMaxWeight);
  c.seed = uint64_t(a.integer("seed", 0, kFlagInt64Max));
  c.precision = a.str("precision");
  c.threads = threads(a);
  c.eval_every = a.integer("eval-every", 0, kFlagInt64Max);
  c.eval_windows = int(a.integer("eval-windows", 1, kFlagIntMax));
  c.save_every = a.integer("save-every", 1, kFlagInt64Max);
  c.stop_after = stop_after(a);
  c.resume = a.on("resume");
  c.model = ModelConfig::from_file(a.str("config"));  // after the flags, whose errors are cheaper
  const double loss = train_lm(c);
  std::printf("final loss %.4f\n", loss);
  return 0;
}

int cmd_eval(int argc, char** argv) {
  Args a;
  a.flag("model", "HF model directory")
      .flag("data", "tokenized corpus directory")
      .flag("split", "corpus split", true, "validation")
      .flag("windows", "windows per domain", true, "64")
      .flag("seq-len", "tokens per window", true, "512")
      .flag("threads", "threads (0: default)", true, "0");
  if (!a.parse(argc, argv, "train eval",
               "Per-domain next-token loss and perplexity of a model on a corpus split."))
    return 0;
  const int windows = int(a.integer("windows", 1, kFlagIntMax));
  const int seq_len = int(a.integer("seq-len", 1, kMaxSeqLen));
  if (const int t = threads(a); t > 0) at::set_num_threads(t);
  auto j = evaluate_lm(a.str("model"), a.str("data"), a.str("split"), windows, seq_len);
  std::cout << j.dump(2) << "\n";
  return 0;
}

int cmd_drafter(int argc, char** argv) {
  Args a;
  a.flag("method", "dspark, dflash or eagle3", true, "dspark")
      .flag("target", "target model directory (frozen embeddings and lm_head)")
      .flag("data", "hidden-state dataset (dspark datagen hidden), or regenerated data (dspark datagen regenerate's "
                    "JSONL: the target computes the hidden states on --device)")
      .flag("out", "run directory; the drafter is written to OUT/drafter")
      .flag("layers", "draft layers (0: 2 for DSpark and DFlash, 1 for EAGLE-3)", true, "0")
      .flag("drafts", "drafts per pass: DSpark gamma, DFlash block - 1, EAGLE-3 TTT steps", true,
            "8")
      .flag("markov-rank", "DSpark Markov head rank (0: none)", true, "64")
      .flag("markov-head", "vanilla, gated or rnn", true, "vanilla")
      .flag("no-confidence", "DSpark without the confidence head", false)
      .flag("anchors", "anchors per sequence", true, "512")
      .flag("sliding-window", "the drafter's sliding_window: context positions a block (EAGLE-3: a row) attends to, "
            "written to its config.json (0: --init's, else the whole context)", true, "0")
      .flag("epochs", "passes over the training samples", true, "1")
      .flag("steps", "optimizer steps (0: from --epochs)", true, "0")
      .flag("batch", "sequences per optimizer step (global)", true, "8")
      .flag("lr", "peak learning rate", true, "6e-4")
      .flag("warmup-ratio", "warmup as a fraction of the steps", true, "0.04")
      .flag("clip", "gradient norm clipping", true, "1.0")
      .flag("ce", "DSpark CE weight", true, "0.1")
      .flag("l1", "DSpark L1(q, p) weight", true, "0.9")
      .flag("conf", "DSpark confidence BCE weight", true, "1.0")
      .flag("decay", "position weight exp(-(k-1)/decay)", true, "4.0")
      .flag("seed", "seed", true, "42")
      .flag("validation-fraction", "fraction of the samples held out for the final validation loss, in [0, 1)", true,
            "0.02")
      .flag("precision", kPrecisionHelp, true, "auto")
      .flag("device", "cpu, cuda or cuda:N (where libtorch has CUDA; f32 there)", true, "cpu")
      .flag("threads", "compute threads (0: default)", true, "0")
      .flag("save-every", "steps between checkpoints", true, "200")
      .flag("stop-after", "stop after this many steps of this run (-1: never)", true, "-1")
      .flag("time-limit", "seconds of training (0: none): after 20 steps, --steps shrinks to what fits", true, "0")
      .flag("resume", "continue from the latest checkpoint in --out", false)
      .flag("rank", "this process's rank (data parallel)", true, "0")
      .flag("world-size", "number of processes (data parallel over gloo)", true, "1")
      .flag("master-port", "rendezvous port on 127.0.0.1", true, "29511")
      .flag("init", "start from this drafter's weights (its config.json gives layers, drafts, heads, target layers)")
      .flag("online", "train on hidden states that --servers export to --store as they answer --prompts", false)
      .flag("prompts", "online: JSONL prompts ({\"prompt\": ...} or {\"turns\": [...]}, optional \"system\")")
      .flag("servers", "online: comma-separated server URLs (http://HOST:PORT,...)")
      .flag("store", "online: the hidden-states store (redis://HOST:PORT/DB or file:DIR)")
      .flag("target-layers", "online or regenerated --data, without --init: target layers to tap, 0-based (-1: "
                             "embeddings), e.g. 1,3,4")
      .flag("max-tokens", "online: response tokens per prompt", true, "128")
      .flag("in-flight", "online: requests at once over all servers (0: 2 per server)", true, "0")
      .flag("queue", "online: verified samples held for training (0: 2 x --batch)", true, "0")
      .flag("api-key", "online: the servers' API key (Authorization: Bearer)")
      .flag("sample-timeout", "online: seconds to wait for a sample in the store", true, "120")
      .flag("request-timeout", "online: seconds per HTTP request", true, "600")
      .flag("server-wait", "online: seconds to wait for each server's GET /v1/models at the start", true, "120")
      .flag("reload-every", "online: write OUT/drafter-step-K and POST /v1/load_drafter every N steps (0: off)",
            true, "0");
  if (!a.parse(argc, argv, "train drafter",
               "Trains a DSpark, DFlash or EAGLE-3 drafter on target hidden states and "
               "writes OUT/drafter\n"
               "in the format dspark generate --speculative-config loads. The hidden states "
               "come from --data\n"
               "(dspark datagen hidden), or with --online from serving engines "
               "(docs/online-training.md)."))
    return 0;
  DrafterTrainConfig c;
  const std::string m = a.str("method");
  if (m == "dspark")
    c.method = SpecMethod::DSpark;
  else if (m == "dflash")
    c.method = SpecMethod::DFlash;
  else if (m == "eagle3")
    c.method = SpecMethod::Eagle3;
  else
    fail("flag --method must be dspark, dflash or eagle3, got '", m, "'");
  c.target = a.str("target");
  c.online.enabled = a.on("online");
  if (c.online.enabled) {
    if (a.opt("data")) fail("flag --data: not used with --online (the samples come from --servers through --store)");
    c.online.prompts = a.str("prompts");
    c.online.servers = split_list(a.str("servers"));
    if (c.online.servers.empty()) fail("flag --servers: no server URL in '", a.str("servers"), "'");
    c.online.store = a.str("store");
    if (auto k = a.opt("api-key")) c.online.api_key = *k;
    c.online.max_tokens = int(a.integer("max-tokens", 1, kFlagIntMax));
    c.online.in_flight = int(a.integer("in-flight", 0, 4096));
    c.online.queue = int(a.integer("queue", 0, kMaxBatch));
    c.online.sample_timeout = a.number("sample-timeout", 0.001, 1e7);
    c.online.request_timeout = a.number("request-timeout", 0.001, 1e7);
    c.online.server_wait = a.number("server-wait", 0, 1e7);
    c.online.reload_every = a.integer("reload-every", 0, kFlagInt64Max);
    if (a.opt("target-layers")) c.target_layers = a.int_list("target-layers", -1, 1 << 16);
  } else {
    for (const char* f : {"prompts", "servers", "store", "api-key"})
      if (a.opt(f)) fail("flag --", f, " needs --online");
    c.data = a.str("data");
    if (a.opt("target-layers")) c.target_layers = a.int_list("target-layers", -1, 1 << 16);
  }
  if (auto i = a.opt("init")) c.init = *i;
  c.out = a.str("out");
  c.layers = int(a.integer("layers", 0, kMaxDraftLayers));
  c.drafts = int(a.integer("drafts", 1, kMaxDrafts));
  c.markov_rank = int(a.integer("markov-rank", 0, kMaxMarkovRank));
  c.markov_head = a.str("markov-head");
  c.confidence = !a.on("no-confidence");
  c.anchors = int(a.integer("anchors", 1, kFlagIntMax));
  c.sliding_window = int(a.integer("sliding-window", 0, kFlagIntMax));
  c.epochs = int(a.integer("epochs", 1, kFlagIntMax));
  c.steps = a.integer("steps", 0, kFlagInt64Max);
  c.batch = int(a.integer("batch", 1, kMaxBatch));
  c.lr = learning_rate(a);
  c.warmup_ratio = a.number("warmup-ratio", 0, 1);
  c.clip = a.number("clip", kTinyPositive, kMaxWeight);
  c.ce_weight = a.number("ce", 0, kMaxWeight);
  c.l1_weight = a.number("l1", 0, kMaxWeight);
  c.conf_weight = a.number("conf", 0, kMaxWeight);
  c.decay = a.number("decay", kTinyPositive, kMaxWeight);
  c.seed = uint64_t(a.integer("seed", 0, kFlagInt64Max));
  c.validation_fraction = a.number("validation-fraction", 0, 1);
  if (c.validation_fraction >= 1)  // [0, 1): at least one sample must remain to train on
    fail("flag --validation-fraction must be at least 0 and below 1, got ", a.str("validation-fraction"));
  c.precision = a.str("precision");
  c.device = a.str("device");
  c.threads = threads(a);
  c.save_every = a.integer("save-every", 1, kFlagInt64Max);
  c.stop_after = stop_after(a);
  c.time_limit = a.number("time-limit", 0, 1e9);
  c.resume = a.on("resume");
  c.world_size = int(a.integer("world-size", 1, kMaxProcesses));
  c.rank = int(a.integer("rank", 0, c.world_size - 1));
  c.master_port = int(a.integer("master-port", 1, 65535));
  const double loss = train_drafter(c);
  std::printf("final loss %.5f\n", loss);
  return 0;
}

// The matrix rate libtorch reaches on this CPU, in f32 and bf16, at a training-like shape.
int cmd_bench_matmul(int argc, char** argv) {
  Args a;
  a.flag("m", "rows", true, "4096")
      .flag("k", "inner dimension", true, "512")
      .flag("n", "columns", true, "1536")
      .flag("threads", "threads (0: default)", true, "0")
      .flag("seconds", "time per dtype", true, "3");
  if (!a.parse(argc, argv, "train bench-matmul",
               "Measures libtorch's f32 and bf16 matrix-multiply rate."))
    return 0;
  if (const int t = threads(a); t > 0) at::set_num_threads(t);
  // Each dimension at most 2^16, so that one f32 operand (at most 16 GiB) is a size a test can mean.
  const int64_t m = a.integer("m", 1, kMaxMatmulDim), k = a.integer("k", 1, kMaxMatmulDim),
                n = a.integer("n", 1, kMaxMatmulDim);
  const double seconds = a.number("seconds", 0.001, 3600);
  nlohmann::json out = {{"m", m}, {"k", k}, {"n", n}, {"threads", at::get_num_threads()}};
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    auto x = torch::randn({m, k}).to(dt), w = torch::randn({k, n}).to(dt);
    torch::matmul(x, w);
    int iters = 0;
    const double t0 = now_seconds();
    while (now_seconds() - t0 < seconds) {
      torch::matmul(x, w);
      ++iters;
    }
    const double gflops = 2.0 * double(m) * k * n * iters / (now_seconds() - t0) / 1e9;
    out[dt == torch::kFloat32 ? "f32_gflops" : "bf16_gflops"] = gflops;
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace dspark::train

int main(int argc, char** argv) {
  // oneDNN (libtorch's bf16 products) keeps a compiled primitive per shape, 1,024 of them by
  // default. Online samples vary in length and so in shapes: the cache filled over half an hour of
  // the demo's online soak, its heap growing 66 -> 150 MiB. Shapes repeat within a step (every layer
  // has the same ones), not across samples, so a smaller cache loses no hits. A value the user set
  // wins; oneDNN reads it at its first product.
  setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "128", /*overwrite=*/0);
  // Keep freed heap memory instead of trimming it back to the kernel after every step. Setting
  // M_TRIM_THRESHOLD also ends glibc's dynamic mmap threshold (so does setting M_TOP_PAD,
  // M_MMAP_THRESHOLD or M_MMAP_MAX): it stays at its 128 KiB default, which M_MMAP_THRESHOLD now
  // says explicitly, because the tensor cache (train/caching_allocator.h) relies on it. Each of
  // its blocks (256 KiB and more) is then a mapping of its own, so a block it evicts goes back to
  // the kernel at once. Without these calls (glibc's defaults: a dynamic threshold that rises to
  // 32 MiB as large blocks are freed) evicted blocks stayed in the heap as free chunks between
  // live ones, which trimming cannot return: the demo's online soak held 0.9 GiB of free heap and
  // 1.7 GiB of RSS after 7 minutes, against 60 MiB and 0.85 GiB with them. A fixed 32 MiB
  // threshold also measured slower on the demo target (6.9 against 5.9 s per step in two
  // alternating pairs of 10-step runs, identical losses).
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  // Buffers above that threshold are mmapped, zeroed by the kernel on first touch and unmapped
  // when freed; libtorch tensors of 256 KiB and more come from a caching allocator instead.
  try {
    dspark::train::CachingCpuAllocator::install();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dspark train: error: %s\n", e.what());
    return 2;
  }
  static const dspark::Subcommand cmds[] = {
      {"lm", "train a target language model on a tokenized corpus", dspark::train::cmd_lm},
      {"eval", "per-domain validation loss and perplexity of a model", dspark::train::cmd_eval},
      {"drafter", "train a DSpark, DFlash or EAGLE-3 drafter on target hidden states",
       dspark::train::cmd_drafter},
      {"bench-matmul", "libtorch f32 and bf16 matrix-multiply rate on this CPU",
       dspark::train::cmd_bench_matmul},
  };
  // argv[0] is dspark-train's path; the program is `dspark train` to its user.
  return dspark::run_program("dspark train", cmds, argc, argv, [](const std::exception& e) {
    const auto* t = dynamic_cast<const c10::Error*>(&e);
    return t ? std::string("libtorch error: ") + t->what_without_backtrace() : std::string();
  });
}

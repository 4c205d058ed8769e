// dspark bench: performance measurements that are not tests (timings are noisy on shared machines).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/bench_connector.h"
#include "cli/bench_serve.h"
#include "cli/bench_spec.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/gemm.h"
#include "core/mmap_file.h"
#include "model/forward.h"
#include "runtime/spec_generate.h"
#include "runtime/step_profile.h"

namespace dspark {

namespace {

int bench_step(int argc, char** argv) {
  Args args;
  args.flag("model", "model directory or GGUF file")
      .flag("shape", "random model of a real shape: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, llama-3.2-1b, tiny-qwen3, tiny-llama")
      .flag("contexts", "cached positions per sequence", true, "512,4096")
      .flag("batches", "sequences per step", true, "1,4,16")
      .flag("tokens", "tokens per sequence per step", true, "1,2,4,8,16")
      .flag("reps", "timed repetitions per point (median reported)", true, "5")
      .flag("prefill-tokens", "prompt length for the prefill measurement (0: skip)", true, "512")
      .flag("gemm", "matrix backend: auto, avx2, avx512bf16, onednn, reference", true, "auto")
      .flag("json", "print JSON", false)
      .flag("sps-out", "also write this machine's SPS(B) curve for the adaptive verification length to FILE "
                       "(use it as \"dspark_sps_curve\": \"FILE\" in dspark serve's speculative config)")
      .flag("num-speculative-tokens", "with --sps-out: the K the curve is for (1..K+1 profiled densely)", true, "8")
      .flag("max-step-tokens", "with --sps-out: the largest step B, as dspark serve's --max-num-batched-tokens "
                               "(profiled up to 512 tokens, extrapolated beyond)", true, "2048");
  add_runtime_flags(args);
  add_kv_cache_flag(args);
  if (!args.parse(argc, argv, "bench step",
                  "Latency of one target forward for batch x tokens-per-sequence at several contexts\n"
                  "(the SPS(B) curve the adaptive verification length uses), prefill tok/s, and the\n"
                  "decode step's weight-streaming rate against the measured DRAM read bandwidth."))
    return 0;
  const LoadOptions load = apply_runtime_flags(args);
  const DType dtype = load.dtype;
  const DType kv_dtype = kv_cache_dtype_from_flag(args, dtype);
  const GemmBackend g = gemm_backend_from_name(args.str("gemm"), "flag --gemm");
  if (g != GemmBackend::Auto && !gemm_backend_available(g))
    fail("flag --gemm ", args.str("gemm"), ": this CPU cannot run it (", cpu_features().describe(), ")");
  set_gemm_backend(g);
  if (args.on("model") == args.on("shape")) fail("give exactly one of --model and --shape");
  std::unique_ptr<Model> model;
  std::string name;
  if (args.on("model")) {
    name = args.str("model");
    model = Model::load(name, load);
  } else {
    name = args.str("shape");
    ModelConfig cfg = shape_config(name);
    if (!load.hf_overrides.is_null()) {  // as Model::load applies them to a config.json
      nlohmann::json j = cfg.to_json();
      j.merge_patch(load.hf_overrides);
      cfg = ModelConfig::from_json(j, "--shape " + name + " with --hf-overrides");
    }
    model = Model::build(cfg, *random_source(7), load);
  }
  StepProfileOptions opt;
  opt.contexts = args.int_list("contexts", 1, 1 << 24);
  opt.batches = args.int_list("batches", 1, 4096);
  opt.tokens = args.int_list("tokens", 1, 4096);
  opt.reps = int(args.integer("reps", 1, 100000));
  opt.kv_dtype = kv_dtype;
  const int prefill_tokens = int(args.integer("prefill-tokens", 0, 1 << 24));
  check_step_profile(model->config(), opt, prefill_tokens);
  const bool json = args.on("json");
  if (!json)
    std::fprintf(stderr, "bench step: %s, %s weights, %d threads, gemm %s, %s\n", name.c_str(), dtype_name(dtype),
                 num_threads(), gemm_backend_name(gemm_backend()), cpu_features().describe().c_str());
  const double bw = measure_read_bandwidth();
  auto points = profile_steps(*model, opt);
  const double prefill = prefill_tokens > 0 ? profile_prefill(*model, prefill_tokens, 512, kv_dtype) : 0;
  const size_t wbytes = streamed_weight_bytes(*model);
  const ModelConfig& c = model->config();

  auto find = [&](int ctx, int b, int t) -> const StepPoint* {
    for (const auto& p : points)
      if (p.context == ctx && p.batch == b && p.tokens_per_seq == t) return &p;
    return nullptr;
  };
  nlohmann::json j;
  j["model"] = name;
  j["dtype"] = dtype_name(dtype);
  j["kv_cache_dtype"] = dtype_name(kv_dtype);
  j["threads"] = num_threads();
  j["gemm"] = gemm_backend_name(gemm_backend());
  j["cpu"] = cpu_features().describe();
  j["params"] = c.num_parameters();
  j["streamed_weight_bytes"] = wbytes;
  j["dram_read_gb_s"] = bw / 1e9;
  j["prefill_tok_s"] = prefill;
  // What a step must read at least: every streamed matrix once, and each sequence's K and V of
  // every layer over its cached and new positions.
  const double kv_per_position =
      double(KvCache::bytes_per_token(c.num_layers, c.num_kv_heads, c.head_dim, opt.kv_dtype));
  auto step_bytes = [&](const StepPoint& p) {
    return double(wbytes) + double(p.batch) * double(p.context + p.tokens_per_seq) * kv_per_position;
  };
  for (const auto& p : points) {
    const StepPoint* base = find(p.context, p.batch, 1);
    j["steps"].push_back({{"context", p.context},
                          {"bytes", step_bytes(p)},
                          {"roofline", step_bytes(p) / bw / p.seconds},
                          {"batch", p.batch},
                          {"tokens_per_seq", p.tokens_per_seq},
                          {"batch_tokens", p.batch * p.tokens_per_seq},
                          {"ms", p.seconds * 1e3},
                          {"steps_per_s", 1.0 / p.seconds},
                          {"vs_1_token", base ? p.seconds / base->seconds : 0.0}});
  }
  // Decode roofline: batch 1, one token, smallest context.
  const StepPoint* d = find(opt.contexts.front(), 1, 1);
  if (d) {
    const double rate = step_bytes(*d) / d->seconds;
    j["decode_stream_gb_s"] = rate / 1e9;
    j["decode_stream_fraction"] = rate / bw;
  }
  if (auto out = args.opt("sps-out")) {
    const int K = int(args.integer("num-speculative-tokens", 1, 64));
    const int max_b = int(args.integer("max-step-tokens", K + 1, 1 << 16));
    const std::vector<double> sps = profile_sps_curve(*model, kv_dtype, K, max_b);
    nlohmann::json f = {{"model", name}, {"dtype", dtype_name(dtype)}, {"threads", num_threads()},
                        {"gemm", gemm_backend_name(gemm_backend())}, {"cpu", cpu_features().describe()},
                        {"num_speculative_tokens", K},
                        {"dspark_sps_curve", std::vector<double>(sps.begin() + 1, sps.end())}};
    std::ofstream o(*out);
    if (!(o << f.dump(1) << "\n")) fail("flag --sps-out: cannot write '", *out, "'");
    if (!json) std::fprintf(stderr, "bench step: SPS(B) for B = 1..%d written to %s\n", max_b, out->c_str());
  }
  if (json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("%-8s %-6s %-7s %-7s %10s %10s %10s %8s %8s %9s\n", "context", "batch", "tok/seq", "tokens", "ms",
              "steps/s", "tok/s", "vs 1-tok", "GB read", "roofline");
  for (const auto& s : j["steps"]) {
    const double ratio = s["vs_1_token"].get<double>();
    char vs[32] = "-";
    if (ratio > 0) std::snprintf(vs, sizeof vs, "%.2f", ratio);
    // tok/s: the step's tokens per second; with --tokens 512 at a context, prefill at that depth.
    std::printf("%-8d %-6d %-7d %-7d %10.2f %10.2f %10.1f %8s %8.2f %9.2f\n", s["context"].get<int>(),
                s["batch"].get<int>(), s["tokens_per_seq"].get<int>(), s["batch_tokens"].get<int>(),
                s["ms"].get<double>(), s["steps_per_s"].get<double>(),
                s["batch_tokens"].get<double>() * s["steps_per_s"].get<double>(),
                vs, s["bytes"].get<double>() / 1e9,
                s["roofline"].get<double>());
  }
  std::printf("\nDRAM read bandwidth (measured): %.1f GB/s\n", bw / 1e9);
  std::printf("GB read: the streamed weights (%.2f GB) once, plus each sequence's K and V over its positions;\n"
              "roofline: that over the DRAM bandwidth, as a share of the step's time\n", double(wbytes) / 1e9);
  if (d)
    std::printf("decode step (context %d) reads %.2f GB: %.1f GB/s = %.0f%% of DRAM bandwidth\n", d->context,
                step_bytes(*d) / 1e9, j["decode_stream_gb_s"].get<double>(), 100 * j["decode_stream_fraction"].get<double>());
  if (prefill > 0) std::printf("prefill: %.1f tok/s (%d tokens)\n", prefill, prefill_tokens);
  return 0;
}

int bench_memory(int argc, char** argv) {
  Args args;
  args.flag("threads", "compute threads (0: all cores)", true, "0").flag("json", "print JSON", false);
  if (!args.parse(argc, argv, "bench memory", "Measures DRAM read bandwidth on the compute threads."))
    return 0;
  set_num_threads(int(args.integer("threads", 0, 1024)));
  const double bw = measure_read_bandwidth();
  if (args.on("json")) std::cout << nlohmann::json{{"threads", num_threads()}, {"dram_read_gb_s", bw / 1e9}}.dump() << "\n";
  else std::printf("DRAM read bandwidth: %.1f GB/s with %d threads\n", bw / 1e9, num_threads());
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  static const Subcommand kWhat[] = {
      {"step", "target step latency vs batch shape (SPS curve), prefill tok/s, decode roofline", bench_step},
      {"memory", "DRAM read bandwidth", bench_memory},
      {"spec", "plain vs speculative generation over a prompt set (acceptance, speedup)", bench_spec},
      {"serve",
       "streaming HTTP load against dspark serve: TTFT, TPOT, ITL, tok/s, acceptance;\n"
       "--sweep over concurrency for plain, DSpark full blocks and adaptive DSpark",
       bench_serve},
      {"connector", "hidden-state samples per second through the connector's store (Redis, dir)", bench_connector},
  };
  return run_subcommand("dspark bench", kWhat, argc, argv);
}

}  // namespace dspark

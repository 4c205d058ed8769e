// dspark bench: performance measurements that are not tests (timings are noisy on shared machines).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/gemm.h"
#include "runtime/step_profile.h"

namespace dspark {

namespace {

std::vector<int> int_list(const std::string& flag, const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long x = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || x <= 0) fail("flag --", flag, " expects positive integers separated by commas, got '", s, "'");
    v.push_back(int(x));
  }
  if (v.empty()) fail("flag --", flag, " is empty");
  return v;
}

int bench_step(int argc, char** argv) {
  Args args;
  args.flag("model", "model directory")
      .flag("shape", "random model of a real shape: qwen3-0.6b, qwen3-1.7b, llama-3.2-1b, tiny-qwen3, tiny-llama")
      .flag("contexts", "cached positions per sequence", true, "512,4096")
      .flag("batches", "sequences per step", true, "1,4,16")
      .flag("tokens", "tokens per sequence per step", true, "1,2,4,8,16")
      .flag("reps", "timed repetitions per point (median reported)", true, "5")
      .flag("prefill-tokens", "prompt length for the prefill measurement (0: skip)", true, "512")
      .flag("gemm", "matrix backend: auto, avx2, onednn, reference", true, "auto")
      .flag("json", "print JSON", false);
  add_runtime_flags(args);
  args.parse(argc, argv);
  if (args.help_requested()) {
    std::cout << args.usage("bench step",
                            "Latency of one target forward for batch x tokens-per-sequence at several contexts\n"
                            "(the SPS(B) curve the scheduler uses), prefill tok/s, and the decode step's\n"
                            "weight-streaming rate against the measured DRAM read bandwidth.");
    return 0;
  }
  const DType dtype = apply_runtime_flags(args);
  const std::string g = args.str("gemm");
  if (g == "auto") set_gemm_backend(GemmBackend::Auto);
  else if (g == "avx2") set_gemm_backend(GemmBackend::Avx2);
  else if (g == "onednn") set_gemm_backend(GemmBackend::OneDnn);
  else if (g == "reference") set_gemm_backend(GemmBackend::Reference);
  else fail("flag --gemm must be auto, avx2, onednn or reference");
  if (args.on("model") == args.on("shape")) fail("give exactly one of --model and --shape");
  std::unique_ptr<Model> model;
  std::string name;
  if (args.on("model")) {
    name = args.str("model");
    model = Model::load(name, LoadOptions{dtype});
  } else {
    name = args.str("shape");
    model = Model::build(shape_config(name), *random_source(7), LoadOptions{dtype});
  }
  StepProfileOptions opt;
  opt.contexts = int_list("contexts", args.str("contexts"));
  opt.batches = int_list("batches", args.str("batches"));
  opt.tokens = int_list("tokens", args.str("tokens"));
  opt.reps = int(args.integer("reps"));
  opt.kv_dtype = dtype;
  const bool json = args.on("json");
  if (!json)
    std::fprintf(stderr, "bench step: %s, %s weights, %d threads, gemm %s, %s\n", name.c_str(), dtype_name(dtype),
                 num_threads(), gemm_backend_name(gemm_backend()), cpu_features().describe().c_str());
  const double bw = measure_read_bandwidth();
  auto points = profile_steps(*model, opt);
  const int prefill_tokens = int(args.integer("prefill-tokens"));
  const double prefill = prefill_tokens > 0 ? profile_prefill(*model, prefill_tokens, 512, dtype) : 0;
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
  j["threads"] = num_threads();
  j["gemm"] = gemm_backend_name(gemm_backend());
  j["cpu"] = cpu_features().describe();
  j["params"] = c.num_parameters();
  j["streamed_weight_bytes"] = wbytes;
  j["dram_read_gb_s"] = bw / 1e9;
  j["prefill_tok_s"] = prefill;
  for (const auto& p : points) {
    const StepPoint* base = find(p.context, p.batch, 1);
    j["steps"].push_back({{"context", p.context},
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
    const double kv_bytes = double(opt.contexts.front()) * c.num_layers * 2.0 * c.kv_dim() * double(dtype_size(dtype));
    const double rate = (double(wbytes) + kv_bytes) / d->seconds;
    j["decode_stream_gb_s"] = rate / 1e9;
    j["decode_stream_fraction"] = rate / bw;
  }
  if (json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("%-8s %-6s %-7s %-7s %10s %10s %8s\n", "context", "batch", "tok/seq", "tokens", "ms", "steps/s", "vs 1-tok");
  for (const auto& s : j["steps"]) {
    const double ratio = s["vs_1_token"].get<double>();
    std::printf("%-8d %-6d %-7d %-7d %10.2f %10.2f %8s\n", s["context"].get<int>(), s["batch"].get<int>(),
                s["tokens_per_seq"].get<int>(), s["batch_tokens"].get<int>(), s["ms"].get<double>(),
                s["steps_per_s"].get<double>(), ratio > 0 ? std::to_string(ratio).substr(0, 4).c_str() : "-");
  }
  std::printf("\nDRAM read bandwidth (measured): %.1f GB/s\n", bw / 1e9);
  if (d)
    std::printf("decode step streams %.2f GB of weights + KV: %.1f GB/s = %.0f%% of DRAM bandwidth\n",
                double(wbytes) / 1e9, j["decode_stream_gb_s"].get<double>(), 100 * j["decode_stream_fraction"].get<double>());
  if (prefill > 0) std::printf("prefill: %.1f tok/s (%d tokens)\n", prefill, prefill_tokens);
  return 0;
}

int bench_memory(int argc, char** argv) {
  Args args;
  args.flag("threads", "compute threads (0: all cores)", true, "0").flag("json", "print JSON", false);
  args.parse(argc, argv);
  if (args.help_requested()) {
    std::cout << args.usage("bench memory", "Measures DRAM read bandwidth on the compute threads.");
    return 0;
  }
  set_num_threads(int(args.integer("threads")));
  const double bw = measure_read_bandwidth();
  if (args.on("json")) std::cout << nlohmann::json{{"threads", num_threads()}, {"dram_read_gb_s", bw / 1e9}}.dump() << "\n";
  else std::printf("DRAM read bandwidth: %.1f GB/s with %d threads\n", bw / 1e9, num_threads());
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  const std::string usage =
      "usage: dspark bench <what> [flags]\n\n"
      "  step     target step latency vs batch shape (SPS curve), prefill tok/s, decode roofline\n"
      "  memory   DRAM read bandwidth\n";
  if (argc < 1 || std::string(argv[0]) == "--help" || std::string(argv[0]) == "-h") {
    std::cout << usage;
    return argc < 1 ? 2 : 0;
  }
  const std::string what = argv[0];
  if (what == "step") return bench_step(argc - 1, argv + 1);
  if (what == "memory") return bench_memory(argc - 1, argv + 1);
  fail("unknown benchmark '", what, "'\n", usage);
}

}  // namespace dspark

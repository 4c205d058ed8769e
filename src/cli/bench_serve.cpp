// dspark bench serve: streaming OpenAI requests against a running server (--base-url) or one it
// starts (--model), timed as `vllm bench serve` times them; --sweep runs the concurrency sweep of
// plain decoding, DSpark with full blocks and DSpark with the adaptive verification length.
#include "cli/bench_serve.h"

#include <signal.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/bench_prompts.h"
#include "cli/flag_files.h"
#include "client/load_run.h"
#include "client/prefix_prompts.h"
#include "client/report.h"
#include "client/server_process.h"
#include "client/svg_plot.h"
#include "client/sweep.h"
#include "core/error.h"
#include "core/flags.h"
#include "spec_decode/spec_config.h"

namespace dspark {

namespace {

void declare_flags(Args& a) {
  a.flag("base-url", "a running server, http://HOST:PORT (instead of --model)")
      .flag("model",
            "start `dspark serve --model DIR --port 0` as a child process (instead of --base-url)")
      .flag("speculative-config",
            "with --model: the server's speculative config JSON (none: plain decoding)")
      .flag("served-model-name",
            "the request's \"model\" (default: the server's first /v1/models entry)")
      .flag("api-key", "sent as Authorization: Bearer KEY")
      .flag("prompts",
            "prompt JSONL (MT-Bench / Spec-Bench, or dspark corpus prompts); request i sends "
            "prompt i mod N",
            true, kDemoMathPrompts)
      .flag("dataset-name",
            "prompts: the --prompts file; prefix_repetition: vLLM's shared-prefix set, questions "
            "about a few long documents (--prefix-repetition-*)",
            true, "prompts")
      .flag("prefix-repetition-prefix-len", "tokens of each shared prefix", true, "256")
      .flag("prefix-repetition-suffix-len", "tokens after the prefix, different in every prompt",
            true, "32")
      .flag("prefix-repetition-num-prefixes",
            "distinct prefixes; prompt i has prefix i mod N. The warm-ups (at least N) are new "
            "prompts, one per prefix, so the run's prefixes are cached when the server caches",
            true, "4")
      .flag("prefix-repetition-document",
            "text the prefixes and suffixes are cut from, by the server's /tokenize", true,
            "/usr/share/common-licenses/GPL-3")
      .flag("endpoint",
            "/v1/chat/completions (the prompt as one user message) or /v1/completions (raw text)",
            true, "/v1/chat/completions")
      .flag(
          "num-prompts",
          "requests to send (0: one per prompt in the file); in a sweep, at least 2 x concurrency",
          true, "0")
      .flag("max-concurrency", "requests in flight at most (0: unbounded, at most 1024 threads)",
            true, "0")
      .flag("request-rate", "requests per second, Poisson arrivals (inf: all at once)", true, "inf")
      .flag("max-tokens", "max tokens per request (max_completion_tokens for chat)", true, "128")
      .flag("temperature", "sampling temperature (0: greedy)", true, "0")
      .flag("seed", "seed of the arrival times; request i is sent seed + i", true, "0")
      .flag("ignore-eos",
            "send \"ignore_eos\": true (fixed-length outputs, where the server allows it)", false)
      .flag("logprobs",
            "ask for logprobs with N top entries per token (chat: logprobs true, top_logprobs N)",
            true)
      .flag("num-warmups", "untimed requests before each run, at its concurrency", true, "0")
      .flag("request-timeout", "seconds to connect and between reads of a response", true, "600")
      .flag("json", "write the result (every point of a sweep) to this JSON file")
      .flag("sweep",
            "concurrency sweep, e.g. 1,2,4,8,16: plain, dspark-full and dspark-adaptive, side by "
            "side")
      .flag("sweep-rounds",
            "with --sweep: run every point this many times, the configs in turn, and report the "
            "round of median tok/s",
            true, "1")
      .flag("sweep-configs",
            "JSON array (or file) of {\"name\", \"speculative_config\", \"base_url\"} for --sweep")
      .flag("plot",
            "with --sweep: write an SVG plot of output tok/s and median TTFT against concurrency")
      .flag("threads", "with --model: the server's --threads")
      .flag("serve-arg",
            "with --model: one more argument for dspark serve (repeatable: --serve-arg=--dtype "
            "--serve-arg f32)")
      .flag("server-log", "with --model: append the server's output to this file")
      .flag("server-timeout", "with --model: seconds for the server to start serving", true, "900");
}

// A speculative config from the command line, checked now (errors name the field).
nlohmann::json spec_from_flag(const std::string& text) {
  try {
    SpecConfig::parse(text);
  } catch (const Error& e) {
    fail(e.what());  // names --speculative-config and the field
  }
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("flag --speculative-config: expected a JSON object");
  return j;
}

std::string command_line(int argc, char** argv) {
  std::string s = "dspark bench serve";
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.find_first_of(" \"'{}$*") != std::string::npos) {
      std::string q = "'";
      for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
      a = q + "'";
    }
    s += " " + a;
  }
  return s;
}

// The load a run sends (or each point of a sweep starts from), from the flags: the endpoint, the
// prompts (a file, or the prefix_repetition set, whose prompts are cut once a server answers),
// the rate, the sampling and the timeouts. Errors name the flag.
LoadOptions load_options(const Args& args, bool sweep,
                         std::optional<PrefixRepetition>& prefix_rep) {
  LoadOptions lo;
  lo.endpoint = args.str("endpoint");
  if (lo.endpoint != "/v1/chat/completions" && lo.endpoint != "/v1/completions")
    fail("flag --endpoint must be /v1/chat/completions or /v1/completions, got '", lo.endpoint,
         "'");
  if (auto k = args.opt("api-key")) lo.api_key = *k;
  if (auto n = args.opt("served-model-name")) lo.model = *n;
  const std::string dataset = args.str("dataset-name");
  const int num_prompts = int(args.integer("num-prompts", 0, 10000000));
  if (dataset == "prefix_repetition") {
    if (sweep) fail("flag --dataset-name prefix_repetition: not with --sweep");
    if (args.on("prompts")) fail("flag --prompts: not with --dataset-name prefix_repetition");
    PrefixRepetition pr;
    pr.prefix_len = int(args.integer("prefix-repetition-prefix-len", 1, 1 << 24));
    pr.suffix_len = int(args.integer("prefix-repetition-suffix-len", 1, 1 << 24));
    pr.num_prefixes = int(args.integer("prefix-repetition-num-prefixes", 1, 100000));
    const std::string doc = args.str("prefix-repetition-document");
    std::ifstream f(doc, std::ios::binary);
    if (!f) fail("flag --prefix-repetition-document: cannot read ", doc);
    pr.document.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (pr.document.empty()) fail("flag --prefix-repetition-document: ", doc, " is empty");
    prefix_rep = std::move(pr);
    lo.num_prompts = num_prompts > 0 ? num_prompts : 4 * prefix_rep->num_prefixes;
  } else if (dataset == "prompts") {
    for (const char* f : {"prefix-repetition-prefix-len", "prefix-repetition-suffix-len",
                          "prefix-repetition-num-prefixes", "prefix-repetition-document"})
      if (args.on(f)) fail("flag --", f, " needs --dataset-name prefix_repetition");
    for (const auto& p : read_prompts(args.str("prompts"), 0)) lo.prompts.push_back(p.text);
    lo.num_prompts = num_prompts > 0 ? num_prompts : int(lo.prompts.size());
  } else {
    fail("flag --dataset-name must be prompts or prefix_repetition, got '", dataset, "'");
  }
  lo.max_concurrency = int(args.integer("max-concurrency", 0, 1000000));
  const std::string rate = args.str("request-rate");
  lo.request_rate = rate == "inf" ? INFINITY : args.number("request-rate", 0, 1e9);
  if (!(lo.request_rate > 0)) fail("flag --request-rate must be > 0 or inf, got '", rate, "'");
  lo.max_tokens = int(args.integer("max-tokens", 1, kFlagIntMax));
  lo.temperature = args.number("temperature", 0, 1e6);
  lo.seed = uint64_t(args.integer("seed", 0, kFlagInt64Max));
  lo.ignore_eos = args.on("ignore-eos");
  if (args.has("logprobs")) lo.logprobs = int(args.integer("logprobs", 0, 20));
  lo.num_warmups = int(args.integer("num-warmups", 0, 1000000));
  lo.timeout_s = args.number("request-timeout", 0.001, 1e7);
  return lo;
}

}  // namespace

int bench_serve(int argc, char** argv) {
  Args args;
  declare_flags(args);
  if (!args.parse(argc, argv, "bench serve",
                  "Streams requests to an OpenAI-compatible server and reports completed/failed,\n"
                  "output tok/s, request/s, TTFT, TPOT, ITL and E2EL (mean, median, p99) and the\n"
                  "speculative acceptance read from /metrics, as `vllm bench serve` does. With\n"
                  "--model it starts `dspark serve` itself. --sweep starts a server for plain\n"
                  "decoding, DSpark with full blocks and DSpark with enable_adaptive_verification\n"
                  "(all of them first, side by side), runs each concurrency against each in turn\n"
                  "(--sweep-rounds times), then prints the sweep table and the ratios of the\n"
                  "serving goals."))
    return 0;
  signal(SIGPIPE, SIG_IGN);  // a server that closes a connection must not end the benchmark

  const bool sweep = args.on("sweep");
  const bool have_model = args.on("model"), have_url = args.on("base-url");
  if (have_model && have_url) fail("give one of --model and --base-url, not both");
  if (!sweep && !have_model && !have_url)
    fail("give --model DIR (a server is started) or --base-url URL");
  if (have_url)
    for (const char* f : {"speculative-config", "threads", "serve-arg", "server-log"})
      if (args.on(f))
        fail("flag --", f, " applies to a server started with --model, not to --base-url");
  if (!sweep)
    for (const char* f : {"sweep-configs", "sweep-rounds", "plot"})
      if (args.on(f)) fail("flag --", f, " needs --sweep");
  if (sweep && !have_model && !have_url && !args.on("sweep-configs"))
    fail("flag --sweep needs --model DIR, --base-url URL or --sweep-configs with base_url entries");

  // Flags first, files after: a bad URL is named even when the prompt file is missing too.
  if (have_url) (void)parse_server_url(args.str("base-url"), "flag --base-url");
  std::optional<PrefixRepetition> prefix_rep;
  LoadOptions lo = load_options(args, sweep, prefix_rep);
  const int num_prompts = int(args.integer("num-prompts", 0, 10000000));
  const std::string rate = args.str("request-rate");

  ServerLaunch launch;
  if (have_model) launch.model = args.str("model");
  if (args.on("threads")) launch.threads = int(args.integer("threads", 0, 1024));
  launch.extra_args = args.list("serve-arg");
  if (auto l = args.opt("server-log")) launch.log_path = *l;
  launch.start_timeout_s = args.number("server-timeout", 1, 1e7);
  std::optional<nlohmann::json> spec;
  if (args.on("speculative-config")) spec = spec_from_flag(args.str("speculative-config"));

  const std::string json_path = args.opt("json").value_or("");
  if (!json_path.empty()) check_writable(json_path, "json");
  if (auto plot = args.opt("plot")) check_writable(*plot, "plot");
  const std::string cmd = command_line(argc, argv);
  if (!sweep) {
    std::unique_ptr<ServerProcess> server;
    if (have_model) {
      launch.speculative_config = spec ? spec->dump() : "";
      std::fprintf(stderr, "bench serve: starting dspark serve ...\n");
      server = std::make_unique<ServerProcess>(launch);
      lo.url = server->url();
      if (lo.model.empty()) lo.model = server->model_name();
    } else {
      lo.url = parse_server_url(args.str("base-url"), "flag --base-url");
    }
    if (lo.model.empty()) lo.model = first_served_model(lo.url, lo.api_key);
    if (prefix_rep) {
      PrefixPromptSet ps =
          prefix_repetition_prompts(lo.url, lo.api_key, lo.model, *prefix_rep, lo.num_prompts);
      lo.prompts = std::move(ps.run);
      lo.warmup_prompts = std::move(ps.warmup);
      lo.num_warmups = std::max(lo.num_warmups, prefix_rep->num_prefixes);
    }
    std::fprintf(stderr, "bench serve: %d requests to %s%s (model %s), concurrency %s, rate %s\n",
                 lo.num_prompts, lo.url.text().c_str(), lo.endpoint.c_str(), lo.model.c_str(),
                 lo.max_concurrency > 0 ? std::to_string(lo.max_concurrency).c_str() : "unbounded",
                 rate.c_str());
    nlohmann::json r = run_load(lo);
    r["command"] = cmd;
    r["speculative_config"] = spec ? *spec : nlohmann::json();
    if (server) {
      r["server_command"] = server->command();
      r["server_exit"] = server->stop();
    }
    print_run_report(stdout, r);
    if (!json_path.empty()) write_file(json_path, r.dump(2) + "\n", "json");
    return r.value("failed", 0) > 0 ? 1 : 0;
  }

  SweepOptions so;
  so.concurrency = args.int_list("sweep", 1, 100000);
  so.min_prompts = num_prompts;
  so.rounds = int(args.integer("sweep-rounds", 1, 1000));
  so.load = lo;
  so.launch = launch;
  if (args.on("sweep-configs")) {
    if (spec) fail("give --speculative-config or --sweep-configs, not both");
    so.configs = parse_sweep_configs(args.str("sweep-configs"), "flag --sweep-configs");
  } else if (have_url) {
    so.configs = {{"server", std::nullopt, args.str("base-url")}};
  } else {
    so.configs = default_sweep_configs(spec ? *spec : demo_speculative_config());
  }
  if (have_url)  // every config without its own base_url uses --base-url
    for (auto& c : so.configs)
      if (c.base_url.empty()) c.base_url = args.str("base-url");
  for (const auto& c : so.configs)
    if (c.base_url.empty() && !have_model)
      fail("flag --sweep-configs: config '", c.name,
           "' has no base_url and there is no --model to start it with");
  nlohmann::json out = run_sweep(so, [](const nlohmann::json& p) { print_point_line(stderr, p); });
  out["command"] = cmd;
  out["settings"] = {
      {"endpoint", lo.endpoint},
      {"max_tokens", lo.max_tokens},
      {"temperature", lo.temperature},
      {"prompts", args.str("prompts")},
      {"min_prompts", num_prompts},
      {"num_warmups", lo.num_warmups},
      {"request_rate", std::isfinite(lo.request_rate) ? nlohmann::json(lo.request_rate) : "inf"}};
  if (have_model) out["settings"]["model"] = launch.model;
  std::printf("\n");
  print_sweep_report(stdout, out);
  if (!json_path.empty()) write_file(json_path, out.dump(2) + "\n", "json");
  if (auto plot = args.opt("plot"))
    write_file(
        *plot,
        svg_plot("dspark bench serve: " + (have_model ? launch.model : std::string("server")),
                 sweep_panels(out)),
        "plot");
  int failed = 0;
  for (const auto& p : out["points"]) failed += p.contains("error") ? 1 : p.value("failed", 0);
  for (const auto& c : out["configs"]) failed += c.contains("error");
  return failed > 0 ? 1 : 0;
}

}  // namespace dspark

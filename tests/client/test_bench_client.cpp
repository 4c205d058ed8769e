// The client of `dspark bench serve` (src/client): SSE and Prometheus parsing, how a streamed
// response is timed, percentiles, Poisson arrivals, URLs and the server's start-up line, sweep
// configs and ratios, the SVG plot, and a whole run against an in-process fake OpenAI server
// with failing requests (counted, never thrown).
#include <gtest/gtest.h>
#include <httplib.h>

#include "../error_of.h"

#include <sys/stat.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <thread>

#include "client/latency_stats.h"
#include "client/load_run.h"
#include "client/prom_text.h"
#include "client/server_process.h"
#include "client/sse.h"
#include "client/stream_request.h"
#include "client/svg_plot.h"
#include "client/sweep.h"

namespace dspark {
namespace {

using dspark::testing::error_of;

TEST(Sse, EventsSplitAcrossPiecesAndLineEndings) {
  std::vector<std::string> got;
  SseParser p([&](const std::string& d) { got.push_back(d); });
  const std::string body =
      ": keep-alive\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: one\ndata: "
      "two\n\ndata:[DONE]\r\r";
  for (char c : body) p.feed(std::string_view(&c, 1));  // one byte at a time
  p.finish();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], "{\"a\":1}");
  EXPECT_EQ(got[1], "one\ntwo");
  EXPECT_EQ(got[2], "[DONE]");
  got.clear();
  SseParser q([&](const std::string& d) { got.push_back(d); });
  q.feed("data: last");  // no blank line before the end of the body
  q.finish();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "last");
}

TEST(PromText, SamplesLabelsAndSums) {
  const std::string t =
      "# HELP vllm:spec_decode_num_drafts Number of drafts.\n"
      "# TYPE vllm:spec_decode_num_drafts counter\n"
      "vllm:spec_decode_num_drafts_total{model_name=\"demo\"} 12\n"
      "vllm:spec_decode_num_drafts_total{model_name=\"other\",engine=\"0\"} 100\n"
      "vllm:x_bucket{le=\"+Inf\",model_name=\"a \\\"q\\\" b\"} 3 1700000000\n"
      "vllm:kv_cache_usage_perc 0.25\n";
  auto s = parse_prom_text(t);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(prom_sum(s, "vllm:spec_decode_num_drafts_total", {{"model_name", "demo"}}), 12);
  EXPECT_EQ(prom_sum(s, "vllm:spec_decode_num_drafts_total"), 112);
  EXPECT_EQ(s[2].labels.at("model_name"), "a \"q\" b");
  EXPECT_EQ(s[2].value, 3);
  EXPECT_EQ(prom_sum(s, "vllm:kv_cache_usage_perc"), 0.25);
  EXPECT_FALSE(prom_has(s, "vllm:nothing"));
  EXPECT_NE(error_of([] { parse_prom_text("ok 1\nbad{x=1} 2\n"); }).find("line 2"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_prom_text("v abc\n"); }).find("not a number"), std::string::npos);
}

TEST(LatencyStats, NumpyPercentiles) {
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
  auto s = summarize({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.std, std::sqrt(1.25));
  EXPECT_TRUE(summary_json(summarize({}), 1e3)["median"].is_null());
  EXPECT_DOUBLE_EQ(summary_json(s, 1e3)["median"].get<double>(), 2500);
}

TEST(StreamTiming, TtftAtFirstTextItlBetweenTextChunksUsageCounts) {
  StreamOutcome o;
  double last = 0;
  bool done = false;
  consume_sse_data(R"({"choices":[{"delta":{"role":"assistant"}}]})", true, 0.10, last, o, done);
  consume_sse_data(R"({"choices":[{"delta":{"content":"ab"}}]})", true, 0.30, last, o, done);
  consume_sse_data(R"({"choices":[{"delta":{"content":"cd"}}]})", true, 0.45, last, o, done);
  consume_sse_data(R"({"choices":[{"delta":{},"finish_reason":"stop"}]})", true, 0.46, last, o,
                   done);
  consume_sse_data(R"({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":5}})", true,
                   0.50, last, o, done);
  EXPECT_FALSE(consume_sse_data("[DONE]", true, 0.6, last, o, done));
  EXPECT_TRUE(done);
  EXPECT_TRUE(o.error.empty());
  EXPECT_DOUBLE_EQ(o.ttft, 0.30);
  ASSERT_EQ(o.itl.size(), 1u);
  EXPECT_NEAR(o.itl[0], 0.15, 1e-12);
  EXPECT_DOUBLE_EQ(o.e2el, 0.50);  // the last data chunk, not [DONE]
  EXPECT_EQ(o.output_tokens, 5);
  EXPECT_EQ(o.prompt_tokens, 9);
  EXPECT_EQ(o.text, "abcd");
  EXPECT_EQ(o.finish_reason, "stop");

  StreamOutcome c;  // completions carry choices[0].text
  done = false;
  consume_sse_data(R"({"choices":[{"text":"x"}]})", false, 0.2, last, c, done);
  EXPECT_EQ(c.text, "x");
  // Logprobs (skipped by the parser) around the fields it reads, in both shapes.
  consume_sse_data(R"({"choices":[{"index":0,"logprobs":{"tokens":["y"],"top_logprobs":[{"y":-0.5}]},"text":"y",)"
                   R"("finish_reason":"length"}]})", false, 0.3, last, c, done);
  EXPECT_EQ(c.text, "xy");
  EXPECT_EQ(c.finish_reason, "length");
  StreamOutcome lp;
  consume_sse_data(R"({"choices":[{"delta":{"content":"ab"},"logprobs":{"content":[{"token":"ab","logprob":-1.0,)"
                   R"("bytes":[97,98],"top_logprobs":[]}]},"finish_reason":null}]})", true, 0.3, last, lp, done);
  consume_sse_data(R"({"choices":[{"delta":{"content":"c"},"logprobs":null,"finish_reason":"stop"}]})", true, 0.4,
                   last, lp, done);
  EXPECT_TRUE(lp.error.empty()) << lp.error;
  EXPECT_EQ(lp.text, "abc");
  EXPECT_EQ(lp.finish_reason, "stop");
  StreamOutcome e;
  consume_sse_data(R"({"error":{"message":"boom","type":"x"}})", true, 0.2, last, e, done);
  EXPECT_NE(e.error.find("boom"), std::string::npos);
  StreamOutcome m;
  consume_sse_data("{not json", true, 0.2, last, m, done);
  EXPECT_NE(m.error.find("malformed"), std::string::npos);
}

TEST(Arrivals, PoissonRescaledAndDeterministic) {
  auto a = poisson_arrivals(50, 10.0, 3), b = poisson_arrivals(50, 10.0, 3);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a[0], 0);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_GE(a[i], a[i - 1]);
  EXPECT_LT(a.back(),
            5.0);  // the 50 gaps add up to 50 / 10 s; the last one is after the last request
  EXPECT_GT(a.back(), 2.0);
  for (double t : poisson_arrivals(5, INFINITY, 1)) EXPECT_EQ(t, 0);
}

TEST(ServerUrl, ParsesAndRefuses) {
  auto u = parse_server_url("http://127.0.0.1:8000/", "flag --base-url");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 8000);
  EXPECT_EQ(u.prefix, "");
  EXPECT_EQ(parse_server_url("http://h/api/", "x").prefix, "/api");
  EXPECT_EQ(parse_server_url("http://[::1]:9/", "x").host, "::1");
  EXPECT_NE(
      error_of([] { parse_server_url("https://h", "flag --base-url"); }).find("flag --base-url"),
      std::string::npos);
  EXPECT_NE(error_of([] { parse_server_url("http://h:99999", "f"); }).find("bad port"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_server_url("http://:80", "f"); }).find("no host"),
            std::string::npos);
}

TEST(ServerProcess, ListeningLine) {
  std::string url, model;
  ASSERT_TRUE(parse_listening_line("dspark serve: listening on http://127.0.0.1:41234 (model demo)",
                                   url, model));
  EXPECT_EQ(url, "http://127.0.0.1:41234");
  EXPECT_EQ(model, "demo");
  EXPECT_FALSE(parse_listening_line("dspark serve: loading models/demo", url, model));
}

// Several rounds: each point is the round of median output tok/s, with every round's tok/s in
// order; a failed round counts as the slowest; an even count takes the lower middle one.
TEST(Sweep, MedianRoundPerPoint) {
  nlohmann::json runs = nlohmann::json::array();
  auto add = [&](const char* cfg, int conc, int round, double tps) {
    runs.push_back(
        {{"config", cfg}, {"concurrency", conc}, {"round", round}, {"output_throughput", tps}});
  };
  add("plain", 4, 1, 300), add("plain", 4, 2, 100), add("plain", 4, 3, 200);
  add("fast", 4, 1, 500), add("fast", 4, 2, 900);
  add("one", 4, 1, 42);
  runs.push_back({{"config", "bad"}, {"concurrency", 4}, {"round", 1}, {"error", "gone"}});
  add("bad", 4, 2, 10), add("bad", 4, 3, 20);
  auto pts = median_points(runs, {"plain", "fast", "one", "bad", "absent"}, {4});
  ASSERT_EQ(pts.size(), 4u) << "no point for a config that never ran";
  EXPECT_EQ(pts[0]["round"], 3);
  EXPECT_DOUBLE_EQ(pts[0]["output_throughput"].get<double>(), 200);
  EXPECT_EQ(pts[0]["rounds_output_throughput"], nlohmann::json({300.0, 100.0, 200.0}));
  EXPECT_DOUBLE_EQ(pts[1]["output_throughput"].get<double>(), 500) << "the lower middle of 2";
  EXPECT_FALSE(pts[2].contains("rounds_output_throughput")) << "one round: as it ran";
  EXPECT_EQ(pts[3]["round"], 2) << "the failed round sorts below 10 and 20";
}

TEST(Sweep, ConfigsAndRatios) {
  auto d = default_sweep_configs(demo_speculative_config());
  ASSERT_EQ(d.size(), 3u);
  EXPECT_FALSE(d[0].speculative_config);
  EXPECT_EQ((*d[1].speculative_config)["enable_adaptive_verification"], false);
  EXPECT_EQ((*d[2].speculative_config)["enable_adaptive_verification"], true);
  auto c = parse_sweep_configs(
      R"([{"name":"a"},{"name":"b","speculative_config":{"method":"ngram"}}])", "f");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ((*c[1].speculative_config)["method"], "ngram");
  EXPECT_NE(error_of([] {
              parse_sweep_configs(R"([{"name":"a","x":1}])", "flag --sweep-configs");
            }).find("unknown field 'x'"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { parse_sweep_configs(R"([{"name":"a"},{"name":"a"}])", "f"); }).find("twice"),
      std::string::npos);
  EXPECT_NE(error_of([] { parse_sweep_configs("[]", "f"); }).find("non-empty"), std::string::npos);

  nlohmann::json pts = nlohmann::json::array();
  auto add = [&](const char* cfg, int conc, double tps, double ttft) {
    pts.push_back({{"config", cfg},
                   {"concurrency", conc},
                   {"output_throughput", tps},
                   {"ttft_ms", {{"median", ttft}}}});
  };
  add("plain", 1, 100, 50), add("plain", 16, 400, 80);
  add("dspark-full", 1, 250, 55), add("dspark-full", 16, 500, 90);
  add("dspark-adaptive", 1, 300, 52), add("dspark-adaptive", 16, 900, 70);
  auto r = sweep_ratios(pts, {"plain", "dspark-full", "dspark-adaptive"}, {1, 16});
  EXPECT_DOUBLE_EQ(r["adaptive_over_plain_tok_s"][0]["ratio"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(r["adaptive_over_plain_tok_s"][1]["ratio"].get<double>(), 2.25);
  EXPECT_DOUBLE_EQ(r["adaptive_over_full_tok_s_at_high"].get<double>(), 1.8);
  EXPECT_DOUBLE_EQ(r["tok_s_high_over_low"][1]["ratio"].get<double>(), 3.0);  // adaptive
  EXPECT_DOUBLE_EQ(r["median_ttft_high_over_low"][0]["ratio"].get<double>(), 1.6);

  nlohmann::json sweep = {
      {"concurrency", {1, 16}},
      {"configs", {{{"name", "plain"}}, {{"name", "dspark-full"}}, {{"name", "dspark-adaptive"}}}},
      {"points", pts}};
  const std::string svg = svg_plot("t <&>", sweep_panels(sweep));
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("t &lt;&amp;&gt;"), std::string::npos);
  size_t lines = 0;
  for (size_t at = 0; (at = svg.find("<polyline points", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 2u + 6u);  // two axis frames, one line per config and panel
  EXPECT_NE(svg.find("dspark-adaptive"), std::string::npos);
  EXPECT_DOUBLE_EQ(nice_step(900, 5), 200);
}

// A fake OpenAI server: every request streams three 2-token chunks and a usage chunk, and
// counts one draft of 3 tokens with 1 accepted per chunk. Prompts ask for failures.
class FakeServer {
 public:
  FakeServer() {
    srv_.Get("/health", [](const httplib::Request&, httplib::Response& r) {
      r.set_content("{}", "application/json");
    });
    srv_.Get("/v1/models", [](const httplib::Request&, httplib::Response& r) {
      r.set_content(R"({"object":"list","data":[{"id":"fake"}]})", "application/json");
    });
    srv_.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
      const int64_t n = chunks_.load();
      r.set_content("vllm:spec_decode_num_drafts_total{model_name=\"fake\"} " + std::to_string(n) +
                        "\nvllm:spec_decode_num_draft_tokens_total{model_name=\"fake\"} " +
                        std::to_string(3 * n) +
                        "\nvllm:spec_decode_num_accepted_tokens_total{model_name=\"fake\"} " +
                        std::to_string(n) + "\n",
                    "text/plain; version=0.0.4");
    });
    auto stream = [this](const httplib::Request& req, httplib::Response& r) {
      auto body = nlohmann::json::parse(req.body);
      const bool chat = req.path == "/v1/chat/completions";
      const std::string prompt = chat ? body["messages"][0]["content"].get<std::string>()
                                      : body["prompt"].get<std::string>();
      if (prompt == "bad") {
        r.status = 400;
        r.set_content(
            R"({"error":{"message":"bad prompt","type":"invalid_request_error","param":null,"code":400}})",
            "application/json");
        return;
      }
      r.set_chunked_content_provider("text/event-stream", [this, chat, prompt](
                                                              size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        send(": ping\n\n");
        for (int i = 0; i < 3; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          if (prompt == "error-event" && i == 1) {
            send("data: {\"error\":{\"message\":\"engine died\"}}\n\n");
            break;
          }
          nlohmann::json c = chat ? nlohmann::json{{"delta", {{"content", "ab"}}}}
                                  : nlohmann::json{{"text", "ab"}};
          send("data: " + nlohmann::json{{"choices", {c}}}.dump() + "\n\n");
          chunks_++;
        }
        send("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":6}}\n\n");
        if (prompt != "no-done") send("data: [DONE]\n\n");
        sink.done();
        return true;
      });
    };
    srv_.Post("/v1/chat/completions", stream);
    srv_.Post("/v1/completions", stream);
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    while (!srv_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    srv_.stop();
    thread_.join();
  }
  ServerUrl url() const {
    return parse_server_url("http://127.0.0.1:" + std::to_string(port_), "test");
  }

 private:
  httplib::Server srv_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int64_t> chunks_{0};
};

TEST(LoadRun, CountsFailuresAndReadsAcceptance) {
  FakeServer fake;
  LoadOptions o;
  o.url = fake.url();
  o.model = first_served_model(o.url, "");
  EXPECT_EQ(o.model, "fake");
  o.prompts = {"ok", "bad", "ok", "error-event", "no-done", "ok"};
  o.num_prompts = 12;
  o.max_concurrency = 3;
  o.max_tokens = 6;
  o.num_warmups = 2;
  o.timeout_s = 30;
  for (const char* ep : {"/v1/chat/completions", "/v1/completions"}) {
    o.endpoint = ep;
    const auto r = run_load(o);
    EXPECT_EQ(r["completed"], 6) << ep;  // the "ok" prompts, twice each
    EXPECT_EQ(r["failed"], 6) << ep;
    EXPECT_EQ(r["total_output_tokens"], 36);
    EXPECT_EQ(r["total_input_tokens"], 24);
    EXPECT_EQ(r["errors"].size(), 3u) << r["errors"].dump();
    const std::string errs = r["errors"].dump();
    EXPECT_NE(errs.find("HTTP 400: bad prompt"), std::string::npos);
    EXPECT_NE(errs.find("engine died"), std::string::npos);
    EXPECT_NE(errs.find("without data: [DONE]"), std::string::npos);
    EXPECT_EQ(r["ttft_ms"]["count"], 6);
    EXPECT_GT(r["ttft_ms"]["median"].get<double>(), 0);
    EXPECT_EQ(r["itl_ms"]["count"], 12);  // two gaps between three text chunks
    EXPECT_GT(r["output_throughput"].get<double>(), 0);
    // Six good requests of three chunks plus the error-event ones' first chunk, counted between
    // the scrapes: 1 + accepted/drafts = 2, accepted/draft_tokens = 1/3.
    EXPECT_DOUBLE_EQ(r["spec_decode"]["acceptance_length"].get<double>(), 2.0);
    EXPECT_NEAR(r["spec_decode"]["acceptance_rate"].get<double>(), 1.0 / 3, 1e-12);
  }
  // A server that is not there fails the test request with a clear message, before any timing.
  LoadOptions gone = o;
  gone.url = parse_server_url("http://127.0.0.1:1", "test");
  EXPECT_NE(error_of([&] { run_load(gone); }).find("test request"), std::string::npos);
}

// ServerProcess with a stand-in for `dspark serve`: a script that prints the start-up line with
// the fake server's port and waits; SIGTERM ends it. And one that exits at once.
TEST(ServerProcess, StartsReadsThePortAndStops) {
  FakeServer fake;
  const std::string dir = ::testing::TempDir();
  const std::string script = dir + "/fake_serve.sh";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\necho \"loading $3\" >&2\necho \"dspark serve: listening on http://127.0.0.1:"
      << fake.url().port << " (model fake)\" >&2\nexec sleep 600\n";
  }
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  ServerLaunch l;
  l.exe = script;
  l.model = "some/dir";
  l.start_timeout_s = 30;
  ServerProcess p(l);
  EXPECT_EQ(p.url().port, fake.url().port);
  EXPECT_EQ(p.model_name(), "fake");
  EXPECT_NE(p.output_tail().find("loading some/dir"), std::string::npos);
  EXPECT_EQ(p.stop(), "signal 15");
  EXPECT_EQ(p.stop(), "");

  l.exe = "/bin/false";
  const std::string e = error_of([&] { ServerProcess q(l); });
  EXPECT_NE(e.find("exited before listening"), std::string::npos) << e;
  EXPECT_NE(e.find("exit 1"), std::string::npos) << e;
}

}  // namespace
}  // namespace dspark

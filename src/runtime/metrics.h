// Engine metrics: the counters, gauges and histograms that /metrics exports under vLLM's names.
// The engine thread writes them; readers take a snapshot under the engine's lock.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "spec_decode/calibration.h"

namespace dspark {

// A cumulative histogram with fixed upper bounds (Prometheus "le" buckets; +Inf implied).
struct Histogram {
  std::vector<double> bounds;  // ascending upper bounds
  std::vector<int64_t>
      counts;  // counts[i]: observations <= bounds[i] (not cumulative); size bounds+1 (last: +Inf)
  double sum = 0;
  int64_t count = 0;

  explicit Histogram(std::vector<double> b = {})
      : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v);
};

// vLLM's bucket bounds (vllm/v1/metrics/loggers.py).
std::vector<double> ttft_buckets();
std::vector<double> itl_buckets();
std::vector<double> e2e_buckets();

struct EngineMetrics {
  // Gauges.
  int num_requests_running = 0;
  int num_requests_waiting = 0;
  double kv_cache_usage_perc =
      0;  // fraction in [0, 1] of KV blocks in use (vLLM reports a fraction)
  // Counters.
  // Prompt tokens of requests that produced their first token (cached or prefilled; counted once).
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;  // tokens emitted
  int64_t num_preemptions = 0;
  // Prefix caching (vLLM's prefix_cache_queries / _hits): prompt tokens of admitted requests, and
  // those the cache held (first admissions only, as vLLM counts preempted requests apart).
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  int64_t steps = 0;                               // engine steps (target forwards)
  std::map<std::string, int64_t> request_success;  // by finished_reason: stop, length, abort
  // Speculative decoding (vLLM's SpecDecodingStats): rounds with drafts, drafted (verified)
  // tokens, accepted drafts, and acceptances per draft position 0..K-1.
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_num_accepted_tokens_per_pos;
  int64_t spec_proposed = 0;     // drafted tokens, verified or cut by the length policy
  int64_t spec_plain_steps = 0;  // steps the policy ran without drafting (a plain step faster)
  // Positions the drafter took as context (their target features, or tokens): a prompt's and
  // every committed token's, unless the request ended without drafting after them.
  int64_t drafter_context_rows = 0;
  double draft_seconds = 0, forward_seconds = 0, step_seconds = 0;
  // Hot-reloaded drafters: the version new requests get (1: the one the engine started with), and
  // per version the rounds, verified drafts and accepted drafts of its requests, for the
  // kMaxDrafterVersions most recent versions (an online trainer reloads every few minutes for
  // weeks: the map and /metrics' label sets stay bounded).
  static constexpr size_t kMaxDrafterVersions = 16;
  int drafter_version = 0;
  struct PerDrafter {
    int64_t drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  };
  std::map<int, PerDrafter> spec_by_drafter;
  PerDrafter dropped_versions;  // versions older than every one kept (not exported)
  // The entry of `version`, made when new; the oldest version is dropped past the bound.
  PerDrafter& per_drafter(int version);
  // Rounds the verification-length policy chose to verify l drafts, l = 0..K (index l).
  std::vector<int64_t> spec_verify_length_hist;
  // Latency histograms, in seconds.
  Histogram ttft{ttft_buckets()};
  Histogram itl{itl_buckets()};
  Histogram e2e{e2e_buckets()};
  Histogram queue_time{e2e_buckets()};
};

// The speculative figures of the requests one run served (bench spec, calibrate, generate --json).
struct SpecMetrics {
  int64_t rounds = 0;    // verification passes
  int64_t drafted = 0;   // drafted tokens that were verified
  int64_t proposed = 0;  // drafted tokens, verified or cut by the length policy
  int64_t accepted = 0;  // accepted drafts (bonus / correction tokens not included)
  std::vector<int64_t> verified_at, accepted_at;  // per draft position 1..K
  double draft_seconds = 0, verify_seconds = 0, other_seconds = 0;
  // When set, every round's confidence logits and accepted count are kept (for calibration).
  bool record_rounds = false;
  std::vector<RoundRecord> round_records;

  // Tokens emitted per round, counting the bonus: (accepted + rounds) / rounds.
  double mean_accepted_length() const {
    return rounds ? double(accepted + rounds) / double(rounds) : 0.0;
  }
  nlohmann::json to_json() const;
  void merge(const SpecMetrics& o);
};

}  // namespace dspark

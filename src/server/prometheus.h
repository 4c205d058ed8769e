// /metrics: engine metrics in the Prometheus text exposition format 0.0.4, under vLLM's names.
#pragma once

#include <string>

#include "runtime/metrics.h"

namespace dspark {

// Counters carry the `_total` suffix, histograms `_bucket{le=...}` (cumulative), `_sum` and
// `_count`; every series has the labels model_name="<served name>" and engine="0" (as vLLM's
// v1 engine). The vllm:spec_decode_* counters appear only when `speculative` is set, as in vLLM.
std::string render_prometheus(const EngineMetrics& m, const std::string& model_name,
                              bool speculative);

// The Content-Type of that text.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace dspark

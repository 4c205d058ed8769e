// The server's side of the hidden-states connector: vLLM's --kv-transfer-config, which requests
// export (kv_transfer_params, or a sampled fraction of live traffic), their handles, and the
// hand-off of finished requests' hidden states to the connector's Exporter (off the engine loop).
//
//   --kv-transfer-config '{"kv_connector": "HiddenStatesConnector", "kv_role": "kv_producer",
//     "kv_connector_extra_config": {"store": "redis://HOST:PORT/DB" | "file:DIR",
//       "export_fraction": 0.0, "max_pending": 64, "max_pending_mib": 1024, "num_writer_threads":
//       2, "layer_ids": [...]}}'
//
// layer_ids (vLLM's ids) default to what the speculative config gives: extract_hidden_states'
// eagle_aux_hidden_state_layer_ids, or a drafter's own target layers plus the last layer (L, what
// the trainer's final-normed state comes from): the export while speculating, which the drafter's
// taps already compute.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "connector/exporter.h"
#include "runtime/engine.h"

namespace dspark {

struct KvTransferConfig {
  std::string connector = "HiddenStatesConnector";
  std::string store;           // redis://... or file:DIR
  double export_fraction = 0;  // of requests that did not ask, exported anyway (live traffic)
  std::vector<int> layer_ids;  // vLLM's ids; empty: from the speculative config
  // Every request is exported and answered with its handle, as vLLM's extract_hidden_states
  // serves Speculators' trainer (whose requests carry no kv_transfer_params). Set by the server
  // for that method, not by the JSON.
  bool export_all = false;
  connector::ExporterOptions exporter;

  // Errors name --kv-transfer-config and the field.
  static KvTransferConfig parse(const std::string& json_text);
};

class HiddenExportSink {
 public:
  // `layer_ids`: vLLM's, already resolved; `dtype_bf16` the export's dtype (the engine's).
  HiddenExportSink(KvTransferConfig cfg, std::vector<int> layer_ids, int num_layers);
  ~HiddenExportSink();

  // The dspark layer ids the engine taps for export (EngineOptions::export_layers).
  const std::vector<int>& engine_layers() const { return engine_layers_; }
  const std::vector<int>& layer_ids() const { return layer_ids_; }
  const std::string& store_url() const { return cfg_.store; }

  // Whether a request exports: it asked (kv_transfer_params), every request does (export_all),
  // or it falls in export_fraction.
  bool wants(bool asked);
  // Whether every request is exported as if it asked (extract_hidden_states).
  bool exports_all() const { return cfg_.export_all; }
  // A handle unique to this attempt: sanitize(request id), this server's nonce, a counter.
  std::string new_handle(const std::string& request_id);
  // EngineOptions::on_export: queues the sample (never blocks; dropped and counted when full).
  void on_export(HiddenExport&& e);

  // The /metrics lines: dspark:hidden_states_exports_total{result=...}, pending, bytes.
  std::string prometheus(const std::string& model_name) const;
  connector::ExportCounts counts() const;
  // SIGTERM: waits for pending writes (bounded), then stops the writers.
  void close();

 private:
  KvTransferConfig cfg_;
  std::vector<int> layer_ids_, engine_layers_;
  std::unique_ptr<connector::Exporter> exporter_;
  std::string nonce_;
  std::atomic<uint64_t> counter_{0};
  std::mutex mu_;
  uint64_t sample_state_ = 0;  // export_fraction's draws
  std::atomic<int64_t> sampled_{0};
};

// vLLM's default export layers for a speculative config: the drafter's target layers (dspark ids)
// as vLLM ids plus L; `aux` when given (extract_hidden_states).
std::vector<int> default_export_layers(const std::vector<int>& drafter_layers, int num_layers);

}  // namespace dspark

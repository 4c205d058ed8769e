#include "server/hidden_export.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "connector/layer_ids.h"
#include "core/error.h"
#include "core/rng.h"

namespace dspark {

using json = nlohmann::json;

KvTransferConfig KvTransferConfig::parse(const std::string& text) {
  const std::string where = "--kv-transfer-config";
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(where, ": expected a JSON object, got: ", text);
  KvTransferConfig c;
  json extra = json::object();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "kv_connector") {
      if (!v.is_string()) fail(where, ": field 'kv_connector' must be a string, got ", v.dump());
      const std::string n = v.get<std::string>();
      // vLLM's names for the same protocol: the example (file) and the Mooncake-store connector.
      if (n != "HiddenStatesConnector" && n != "ExampleHiddenStatesConnector" &&
          n != "MooncakeHiddenStatesConnector")
        fail(where, ": field 'kv_connector' is '", n,
             "'; supported: HiddenStatesConnector (also accepted as ExampleHiddenStatesConnector "
             "and MooncakeHiddenStatesConnector)");
      c.connector = n;
    } else if (k == "kv_role") {
      if (v != "kv_producer")
        fail(where,
             ": field 'kv_role' must be \"kv_producer\" (this server writes hidden states), got ",
             v.dump());
    } else if (k == "kv_connector_extra_config") {
      if (!v.is_object())
        fail(where, ": field 'kv_connector_extra_config' must be an object, got ", v.dump());
      extra = v;
    } else if (k == "kv_connector_module_path" || k == "engine_id" || k == "kv_buffer_device") {
      // vLLM's plumbing for out-of-tree Python connectors and devices: nothing to do here.
    } else {
      fail(where, ": unknown field '", k,
           "' (supported: kv_connector, kv_role, kv_connector_extra_config)");
    }
  }
  auto number = [&](const char* key, double lo, double hi) {
    const json& v = extra[key];
    if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi)
      fail(where, ": field 'kv_connector_extra_config.", key, "' must be a number in [", lo, ", ",
           hi, "], got ", v.dump());
    return v.get<double>();
  };
  for (auto it = extra.begin(); it != extra.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "store") {
      if (!v.is_string() || v.get<std::string>().empty())
        fail(where,
             ": field 'kv_connector_extra_config.store' must be \"redis://HOST:PORT/DB\" or "
             "\"file:DIR\", got ",
             v.dump());
      c.store = v.get<std::string>();
    } else if (k == "shared_storage_path") {  // the example connector's directory
      if (!v.is_string() || v.get<std::string>().empty())
        fail(where,
             ": field 'kv_connector_extra_config.shared_storage_path' must be a directory, got ",
             v.dump());
      c.store = "file:" + v.get<std::string>();
    } else if (k == "export_fraction") {
      c.export_fraction = number("export_fraction", 0, 1);
    } else if (k == "max_pending") {
      c.exporter.max_pending = int(number("max_pending", 1, 1 << 20));
    } else if (k == "max_pending_mib") {
      c.exporter.max_pending_bytes =
          int64_t(number("max_pending_mib", 1, 1 << 20) * double(1 << 20));
    } else if (k == "num_writer_threads") {
      c.exporter.threads = int(number("num_writer_threads", 1, 64));
    } else if (k == "layer_ids") {
      if (!v.is_array() || v.empty())
        fail(where,
             ": field 'kv_connector_extra_config.layer_ids' must be a non-empty array of vLLM "
             "layer ids, got ",
             v.dump());
      for (const json& x : v) {
        if (!x.is_number_integer())
          fail(where, ": field 'kv_connector_extra_config.layer_ids' holds ", x.dump(),
               ", not an integer");
        c.layer_ids.push_back(x.get<int>());
      }
    } else if (k == "use_synchronization_lock" || k == "allow_custom_save_path") {
      // the example connector's file locking and custom paths: the manifest is the commit marker
      // here, and client-chosen paths are never taken
    } else {
      fail(where, ": unknown field 'kv_connector_extra_config.", k,
           "' (supported: store, shared_storage_path, export_fraction, max_pending, "
           "max_pending_mib, "
           "num_writer_threads, layer_ids)");
    }
  }
  if (c.store.empty())
    fail(where,
         ": field 'kv_connector_extra_config.store' is required (\"redis://HOST:PORT/DB\" or "
         "\"file:DIR\")");
  return c;
}

std::vector<int> default_export_layers(const std::vector<int>& drafter_layers, int num_layers) {
  std::vector<int> ids = connector::vllm_layers_from_dspark(drafter_layers);
  if (std::find(ids.begin(), ids.end(), num_layers) == ids.end()) ids.push_back(num_layers);
  return ids;
}

HiddenExportSink::HiddenExportSink(KvTransferConfig cfg, std::vector<int> layer_ids, int num_layers)
    : cfg_(std::move(cfg)), layer_ids_(std::move(layer_ids)) {
  if (layer_ids_.empty()) fail("--kv-transfer-config: no layers to export");
  engine_layers_ = connector::dspark_layers_from_vllm(layer_ids_, num_layers);
  // Checks the URL now (a bad one is a start-up error); the store itself may still be down.
  const std::string url = cfg_.store;
  (void)connector::open_store(url);
  exporter_ = std::make_unique<connector::Exporter>([url] { return connector::open_store(url); },
                                                    cfg_.exporter);
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08x%04x", unsigned(rd()), unsigned(::getpid()) & 0xffffu);
  nonce_ = buf;
  sample_state_ = (uint64_t(rd()) << 32) | rd();
}

HiddenExportSink::~HiddenExportSink() {
  close();
}

bool HiddenExportSink::wants(bool asked) {
  if (asked || cfg_.export_all) return true;
  if (cfg_.export_fraction <= 0) return false;
  std::lock_guard<std::mutex> lk(mu_);
  // splitmix64: which live requests are sampled is the server's business, never the output's.
  const uint64_t z = splitmix64(sample_state_);
  const bool take = double(z >> 11) * 0x1.0p-53 < cfg_.export_fraction;
  if (take) ++sampled_;
  return take;
}

std::string HiddenExportSink::new_handle(const std::string& request_id) {
  return connector::sanitize_handle(request_id) + "-" + nonce_ + "-" +
         std::to_string(counter_.fetch_add(1) + 1);
}

void HiddenExportSink::on_export(HiddenExport&& e) {
  if (!exporter_) return;
  if (!e.error.empty()) {
    exporter_->submit_error(std::move(e.handle), std::move(e.error));
    return;
  }
  connector::HiddenSample s;
  s.handle = std::move(e.handle);
  s.token_ids.assign(e.token_ids.begin(), e.token_ids.end());
  s.layer_ids = layer_ids_;
  s.hidden = e.hidden;
  s.dtype = e.bf16 ? "bfloat16" : "float32";
  s.hidden_bytes = std::move(e.bytes);
  s.info = {{"request_id", e.request_id},
            {"prompt_tokens", e.prompt_tokens},
            {"output_tokens", e.output_tokens},
            {"server", nonce_}};
  exporter_->submit(std::move(s));
}

connector::ExportCounts HiddenExportSink::counts() const {
  return exporter_ ? exporter_->counts() : connector::ExportCounts{};
}

void HiddenExportSink::close() {
  if (exporter_) exporter_->close();
}

std::string HiddenExportSink::prometheus(const std::string& model_name) const {
  const connector::ExportCounts c = counts();
  const std::string lab = "model_name=\"" + model_name + "\",engine=\"0\"";
  std::ostringstream os;
  os << "# HELP dspark:hidden_states_exports_total Hidden-state samples handed to the connector, "
        "by outcome.\n# TYPE dspark:hidden_states_exports_total counter\n";
  auto line = [&](const char* result, int64_t v) {
    os << "dspark:hidden_states_exports_total{" << lab << ",result=\"" << result << "\"} " << v
       << "\n";
  };
  line("written", c.written);
  line("error_manifest", c.errors_written);
  line("dropped_pending_full", c.dropped_full);
  line("dropped_store_full", c.dropped_store_full);
  line("failed", c.failed);
  os << "# HELP dspark:hidden_states_exports_pending Samples queued or being written.\n"
        "# TYPE dspark:hidden_states_exports_pending gauge\n"
        "dspark:hidden_states_exports_pending{"
     << lab << "} " << c.pending << "\n";
  os << "# HELP dspark:hidden_states_export_bytes_total Hidden-state bytes written to the store.\n"
        "# TYPE dspark:hidden_states_export_bytes_total counter\n"
        "dspark:hidden_states_export_bytes_total{"
     << lab << "} " << c.bytes_written << "\n";
  os << "# HELP dspark:hidden_states_sampled_total Requests exported by export_fraction without "
        "asking.\n# TYPE dspark:hidden_states_sampled_total counter\n"
        "dspark:hidden_states_sampled_total{"
     << lab << "} " << sampled_.load() << "\n";
  return os.str();
}

}  // namespace dspark

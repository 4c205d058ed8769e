// The hidden-states connector's store: where serving engines put the target hidden states of
// finished requests and the online trainer takes them (../shared/reference/vllm_mooncake.md 4.3,
// 4.4). Two backends, one protocol:
//   redis://HOST:PORT[/DB]  a Redis server (hiredis). Per sample three keys, each value the raw
//                           bytes any client in any language can read with the manifest alone:
//                             {handle}:hidden_states  [num_tokens, n_layers, hidden], little-endian,
//                                                      C order, dtype "bfloat16" or "float32"
//                             {handle}:token_ids      [num_tokens] "int64"
//                             {handle}:meta           the JSON manifest, written LAST: its presence
//                                                     is the commit marker
//   file:DIR                one directory (vLLM's ExampleHiddenStatesConnector layout):
//                             DIR/{handle}.safetensors  tensors hidden_states and token_ids
//                             DIR/{handle}.meta.json    the manifest, renamed into place last
// Manifest: {"version": 1, "status": "ok", "tensors": {"hidden_states": {"shape": [...],
// "dtype": "bfloat16", "crc32": "%08x"}, "token_ids": {...}}, "layer_ids": [...] (vLLM's
// convention: the residual stream entering layer i; L is the last layer's output before the final
// norm), "info": {...}} or, when extraction failed, {"version": 1, "status": "error",
// "error": "..."} with no tensors.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace dspark::connector {

constexpr int kManifestVersion = 1;

// The store could not be reached, or answered with an error (the message names its URL).
class StoreError : public Error {
 public:
  using Error::Error;
};
// The store refused a write for lack of memory (Redis maxmemory, a full disk).
class StoreFull : public StoreError {
 public:
  using StoreError::StoreError;
};

struct HiddenSample {
  std::string handle;
  std::vector<int64_t> token_ids;  // [num_tokens]
  std::vector<int> layer_ids;      // vLLM's convention, one per hidden_states slot
  int hidden = 0;
  std::string dtype = "bfloat16";  // of hidden_states: "bfloat16" or "float32"
  std::string hidden_bytes;        // [num_tokens, layer_ids.size(), hidden] in dtype, LE, C order
  nlohmann::json info = nlohmann::json::object();  // free-form: request id, server, prompt length

  int64_t num_tokens() const { return int64_t(token_ids.size()); }
  // hidden_states slot `layer` of token t as f32 (either dtype).
  void row_f32(int64_t t, int layer, float* out) const;
};

// Why a sample could not be taken. The trainer skips, counts and logs it with its handle, and
// asks for the prompt again.
class SampleUnusable : public Error {
 public:
  enum class Why { Timeout, ErrorManifest, BadManifest, Missing, Crc, Shape };
  SampleUnusable(Why why, const std::string& msg) : Error(msg), why(why) {}
  Why why;
};
const char* why_name(SampleUnusable::Why why);  // "timeout", "error_manifest", ...

class HiddenStatesStore {
 public:
  virtual ~HiddenStatesStore() = default;
  virtual std::string url() const = 0;

  // Tensors first, then the manifest last. On any failure removes what it wrote and rethrows
  // (StoreFull for lack of memory, StoreError otherwise); the sample then does not exist.
  virtual void put_sample(const HiddenSample& s) = 0;
  // The error manifest (status "error", the message cut to 4096 bytes) for a failed extraction.
  virtual void put_error(const std::string& handle, const std::string& message) = 0;
  // The manifest if it is there (parsed), else nullopt. StoreError when the store is unreachable.
  virtual std::optional<nlohmann::json> get_manifest(const std::string& handle) = 0;
  // Reads and verifies a committed sample: status, version, shapes, dtypes, every CRC32.
  // SampleUnusable (never a partial sample) when it does not verify.
  virtual HiddenSample get_sample(const std::string& handle) = 0;
  // Removes every key (file) of the sample; absent ones are fine.
  virtual void delete_sample(const std::string& handle) = 0;
  // Handles with a committed manifest (ok or error) that start with `prefix` (a sweep at the
  // end of a run, the store's backlog).
  virtual std::vector<std::string> handles(const std::string& prefix) = 0;
  // Drops the connection so the next call reconnects (after a store restart).
  virtual void reconnect() = 0;
};

// "redis://HOST:PORT[/DB]" or "file:DIR" (created if absent). Error naming `url` otherwise.
// `timeout`: per command (Redis) before a StoreError.
std::unique_ptr<HiddenStatesStore> open_store(
    const std::string& url, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

// Polls get_manifest every `poll` until it appears or `timeout` passes (SampleUnusable Timeout),
// retrying through StoreError (a restarting store) until the deadline; then get_sample.
HiddenSample wait_for_sample(HiddenStatesStore& store, const std::string& handle,
                             std::chrono::milliseconds timeout,
                             std::chrono::milliseconds poll = std::chrono::milliseconds(50));

// vLLM's sanitize(): every char outside [A-Za-z0-9_-] becomes '_', and a leading digit gets a
// 'k' prefix.
std::string sanitize_handle(std::string_view request_id);

}  // namespace dspark::connector

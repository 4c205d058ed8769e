// What the two store backends share (internal to dspark_connector): checks of a sample before it
// is written, the manifest's construction and verification, and the backends' constructors.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "connector/hidden_states_store.h"

namespace dspark::connector::detail {

// The manifest's tensor names (and the Redis key suffixes).
constexpr const char* kHiddenStates = "hidden_states";
constexpr const char* kTokenIds = "token_ids";
constexpr size_t kMaxErrorBytes = 4096;

// Refuses (Error naming it) a handle outside [A-Za-z0-9_-]+: handles become key and file names.
void check_handle(const std::string& handle);
bool valid_handle(const std::string& handle);
// Bytes per element of a manifest dtype ("bfloat16" 2, "float32" 4, "int64" 8); 0 if unknown.
size_t manifest_dtype_size(const std::string& dtype);
// Refuses (Error naming the handle) a sample that cannot be written as it is: a bad handle, an
// unknown dtype, hidden < 1, no layer ids, hidden_bytes not num_tokens * layers * hidden elements,
// or an info that is not an object.
void check_sample(const HiddenSample& s);
// token_ids as their little-endian bytes.
std::string token_bytes(const std::vector<int64_t>& ids);

nlohmann::json ok_manifest(const HiddenSample& s, const std::string& token_bytes);
// The message cut to kMaxErrorBytes (at a UTF-8 boundary; invalid UTF-8 replaced).
nlohmann::json error_manifest(const std::string& message);
// The manifest's JSON text (invalid UTF-8 in strings replaced, never a throw).
std::string dump_manifest(const nlohmann::json& m);
// Parses a manifest's bytes; SampleUnusable BadManifest naming the handle when it is not JSON.
nlohmann::json parse_manifest_text(const std::string& text, const std::string& handle,
                                   const std::string& url);

// One tensor of a verified manifest.
struct TensorSpec {
  std::vector<int64_t> shape;
  std::string dtype;
  uint32_t crc = 0;
  size_t nbytes = 0;  // product(shape) * dtype size
};
// A manifest that passed every check that needs no tensor bytes.
struct CheckedManifest {
  TensorSpec hidden, tokens;
  std::vector<int> layer_ids;
  nlohmann::json info = nlohmann::json::object();
};
// status (ErrorManifest with its message), version, tensors, dtypes, shapes against each other
// and the layer ids (BadManifest, Shape). Every message names the handle.
CheckedManifest check_manifest(const nlohmann::json& m, const std::string& handle,
                               const std::string& url);
// Verifies byte lengths (Shape) and CRCs (Crc) of the two tensors and builds the sample.
HiddenSample make_sample(const std::string& handle, const std::string& url,
                         const CheckedManifest& m, std::string hidden_bytes,
                         const std::string& token_bytes);

std::unique_ptr<HiddenStatesStore> open_redis_store(const std::string& url, std::string host,
                                                    int port, int db,
                                                    std::chrono::milliseconds timeout);
std::unique_ptr<HiddenStatesStore> open_dir_store(const std::string& url, const std::string& dir);

}  // namespace dspark::connector::detail

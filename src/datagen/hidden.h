// Target hidden states for drafter training, in the Speculators layout: one safetensors file per
// regenerated sequence,
//   DIR/shard-00000/sample-000000.safetensors
//     hidden_states [T, n_layers + 1, H] bf16: the outputs of the chosen target layers, in order,
//                   then the final-normed hidden state (what lm_head reads) as the last slot
//     token_ids     [T] I64
//     loss_mask     [T] U8
//     __metadata__  id, layer ids (ours and vLLM/Speculators'), the last slot's meaning
//   DIR/manifest.json  written last, after each completed shard (hidden_dataset.h reads it)
//
// Sample i is record i of the regenerated JSONL; shard k holds samples [k*S, (k+1)*S).
// Sequences are packed into batched prefill passes of at most max_batch_tokens rows (a longer
// sequence is split over passes; its K/V stay cached in between). Logits are never computed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"

namespace dspark::datagen {

struct HiddenOptions {
  std::vector<int> layer_ids;  // 0-based decoder-layer outputs (-1: the embeddings)
  int shard_size = 256;
  int max_batch_tokens = 2048;
  int64_t limit = -1;          // the first `limit` records; -1: all
  bool progress = true;
  std::string target_path;          // recorded in the manifest
  std::string target_config_crc32;  // hex CRC32 of the target's config.json (checked on resume when set)
  std::function<void(const std::string&)> log;  // warnings and notes (default: stderr)
};

struct HiddenStats {
  int64_t samples = 0;   // in range
  int64_t skipped = 0;   // already in the manifest with a matching file
  int64_t written = 0;   // computed by this run
  int64_t repaired = 0;  // of those, listed in the manifest but missing, damaged or stale
  int64_t tokens = 0;    // tokens run through the target by this run
  int64_t forwards = 0;
  double seconds = 0;
};

// CRC32 of a record's input_ids (int32 little-endian) followed by its loss_mask bytes: ties a
// sample to the regenerated record it was computed from.
uint32_t regen_input_crc(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask);

// A record longer than the target's maximum model length (max_position_embeddings) is an Error
// naming the file, the record and its length. `out_dir` may hold a previous run: of the same
// source (same CRC32 and record count, wherever it lives, or the same path edited or grown in
// place) it is resumed and repaired, every sample checked against its record and those that no
// longer are one dropped; a previous run of another source is refused, naming both.
HiddenStats extract_hidden(const Model& model, const std::string& regen_jsonl, const std::string& out_dir,
                           const HiddenOptions& opt);

}  // namespace dspark::datagen

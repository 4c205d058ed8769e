// HiddenDataset: reads the hidden-state samples `dspark datagen hidden` writes (hidden.h), for the
// trainer, without libtorch. Every problem is an Error naming the file: a missing sample, a
// CRC mismatch, a wrong dtype or shape, a manifest that does not parse or lacks a field, or
// whose samples disagree with its header (indices past the source's records, a count that is
// not the list's, "complete" with fewer or more samples than the source has records).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dspark::datagen {

constexpr const char* kHiddenFormat = "dspark-hidden-states";
constexpr int kHiddenFormatVersion = 1;

class HiddenDataset {
 public:
  // Reads and validates DIR/manifest.json and checks that every listed sample file exists.
  static HiddenDataset open(const std::string& dir);

  size_t size() const { return entries_.size(); }

  struct Sample {
    int64_t id = -1;              // the regenerated record's id
    std::vector<int32_t> tokens;
    std::vector<uint8_t> loss_mask;
    int layers = 0;               // tapped target layers; hidden_states has layers + 1 slots
    int hidden = 0;
    std::vector<float> hidden_states;  // [T][layers + 1][hidden] as f32; slot `layers` is final-normed

    const float* at(int64_t t, int slot) const { return hidden_states.data() + (t * (layers + 1) + slot) * hidden; }
  };
  // Loads sample i, checking its CRC32 against the manifest, then dtypes and shapes.
  Sample load(size_t i) const;
  // Checks the CRC32 of every sample file (load() checks the one it reads).
  void verify() const;

  const std::vector<int>& layer_ids() const { return layer_ids_; }       // 0-based decoder-layer outputs
  const std::vector<int>& speculators_layer_ids() const { return spec_ids_; }  // layer_ids + 1
  int hidden_size() const { return hidden_; }
  int64_t tokens(size_t i) const;       // sequence length of sample i
  int64_t loss_tokens(size_t i) const;
  int64_t id(size_t i) const;
  std::string file(size_t i) const;     // absolute path of sample i
  const std::string& dir() const { return dir_; }
  const nlohmann::json& manifest() const { return manifest_; }

 private:
  struct Entry {
    std::string file;  // relative to dir
    int64_t id = -1;
    int64_t tokens = 0;
    int64_t loss_tokens = 0;
    uint32_t crc = 0;
  };
  const Entry& entry(size_t i) const;
  std::string dir_, manifest_path_;
  nlohmann::json manifest_;
  std::vector<int> layer_ids_, spec_ids_;
  int hidden_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace dspark::datagen

namespace dspark {
using datagen::HiddenDataset;  // the trainer's name for it
}  // namespace dspark

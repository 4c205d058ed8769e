// A drafter's training samples on the training device: token ids, the loss mask, and the target's
// hidden states at the tapped layers. They come from a hidden-state dataset (`dspark datagen
// hidden`, read from disk), from the online stream (train/online_source.h), or from regenerated
// data (`dspark datagen regenerate`'s JSONL), whose hidden states the frozen target computes here,
// on the training device, as each sample is drawn. The last needs no hidden-state dataset on disk
// (the demo's 12000 answers take 11 GB as one and 17 MB as JSONL; the file is mapped, and only
// each record's place is held, so memory stays flat as it grows) and costs a target forward per
// sample: little on a GPU; on 2 CPU cores about 0.2 s for a 230-token sample of the demo target,
// where the dataset is the cheaper way.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "datagen/hidden_dataset.h"

namespace dspark::train {

struct TrainSample {
  int64_t id = -1;  // the regenerated record's id
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask;
  int layers = 0;  // tapped target layers; `hidden` has layers + 1 slots
  int hidden_size = 0;
  torch::Tensor
      hidden;  // [T, layers + 1, hidden_size] f32 on the device; slot `layers` is final-normed
};

// A dataset's or the online stream's sample with its hidden states on `device` (on the CPU the
// tensor takes over the sample's buffer; pass an rvalue to avoid copying it).
TrainSample to_device(HiddenDataset::Sample s, const torch::Device& device);

class DrafterData {
 public:
  // `path`: a hidden-state dataset directory, or a regenerated-data JSONL file whose hidden states
  // `target` computes at `tap_layers` (0-based decoder-layer outputs, -1 the embeddings) on
  // `device`; the caller checks `tap_layers` against the target (the trainer's check_layer_ids,
  // which names the flag). Errors name the path, the record or the field: an unfinished dataset or
  // regeneration (a partial last line), data made from another target (the CRC32 of its config.json
  // in the dataset's manifest or in PATH.meta.json), a token id outside the target's vocabulary.
  static DrafterData open(const std::string& path, const std::string& target,
                          const std::vector<int>& tap_layers, const torch::Device& device);
  // True for a path that names regenerated data (a file) rather than a dataset (a directory).
  static bool is_regenerated(const std::string& path);

  size_t size() const;
  TrainSample load(size_t i) const;
  const std::vector<int>& layer_ids() const { return layer_ids_; }
  int hidden_size() const { return hidden_size_; }
  // The dataset, when the samples are read from one (null for regenerated data).
  const HiddenDataset* dataset() const { return dataset_ ? &*dataset_ : nullptr; }

 private:
  struct Regenerated;  // the records and the target that computes their hidden states
  torch::Device device_{torch::kCPU};
  std::optional<HiddenDataset> dataset_;
  std::shared_ptr<Regenerated> regen_;
  std::vector<int> layer_ids_;
  int hidden_size_ = 0;
};

}  // namespace dspark::train

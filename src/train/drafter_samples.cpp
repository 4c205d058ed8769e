#include "train/drafter_samples.h"

#include <filesystem>

#include "core/crc32.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "datagen/regen_file.h"
#include "model/config.h"
#include "train/qwen3_model.h"

namespace dspark::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

TrainSample to_device(const HiddenDataset::Sample& s, const torch::Device& device) {
  TrainSample t;
  t.id = s.id;
  t.tokens = s.tokens;
  t.loss_mask = s.loss_mask;
  t.layers = s.layers;
  t.hidden_size = s.hidden;
  auto view = torch::from_blob(const_cast<float*>(s.hidden_states.data()),
                               {int64_t(s.tokens.size()), s.layers + 1, s.hidden}, torch::kFloat32);
  t.hidden = device.is_cpu() ? view.clone() : view.to(device);
  return t;
}

struct DrafterData::Regenerated {
  std::string path;
  std::vector<datagen::RegenRecord> records;
  CausalLM target{nullptr};
  int vocab = 0;
};

bool DrafterData::is_regenerated(const std::string& path) {
  return fs::is_regular_file(path);
}

DrafterData DrafterData::open(const std::string& path, const std::string& target,
                              const std::vector<int>& tap_layers, const torch::Device& device) {
  DrafterData d;
  d.device_ = device;
  if (!is_regenerated(path)) {
    d.dataset_ = HiddenDataset::open(path);
    d.layer_ids_ = d.dataset_->layer_ids();
    d.hidden_size_ = d.dataset_->hidden_size();
    return d;
  }
  // Regenerated data: only what the target itself made trains its drafter.
  const std::string meta_path = path + ".meta.json";
  const std::string config = (fs::path(target) / "config.json").string();
  if (fs::exists(meta_path)) {
    json meta = json::parse(read_text_file(meta_path), nullptr, false);
    if (meta.is_discarded() || !meta.is_object()) fail(meta_path, ": not a JSON object");
    const std::string recorded = meta.value("config_crc32", std::string());
    const std::string now = crc32_hex(crc32_file(config));
    if (!recorded.empty() && recorded != now)
      fail(meta_path, ": field \"config_crc32\" is ", recorded, " but the --target config ", config,
           " has CRC32 ", now,
           ": another target answered these prompts; pass that --target or regenerate --data");
  }
  auto r = std::make_shared<Regenerated>();
  r->path = path;
  datagen::RegenFile file = datagen::read_regen_file(path);
  if (file.truncated_tail)
    fail(path,
         ": the last line is incomplete (an interrupted dspark datagen regenerate); finish it "
         "before training");
  if (file.records.empty()) fail(path, ": no records");
  r->records = std::move(file.records);
  const ModelConfig cfg = ModelConfig::from_dir(target);
  r->vocab = cfg.vocab_size;
  for (size_t i = 0; i < r->records.size(); ++i)
    for (int32_t t : r->records[i].input_ids)
      if (t < 0 || t >= r->vocab)
        fail(path, ": record ", i + 1, " (id ", r->records[i].id, ") holds token id ", t,
             ", outside the --target's ", r->vocab, "-token vocabulary");
  for (int id : tap_layers)
    if (id < -1 || id >= cfg.num_layers)
      fail("target layer id ", id, " is outside -1..", cfg.num_layers - 1,
           " (the --target's layers)");
  r->target = CausalLM(cfg);
  load_hf_weights(r->target, target);
  r->target->to(device);
  r->target->eval();
  for (auto& p : r->target->parameters()) p.set_requires_grad(false);
  d.regen_ = std::move(r);
  d.layer_ids_ = tap_layers;
  d.hidden_size_ = cfg.hidden_size;
  return d;
}

size_t DrafterData::size() const {
  return dataset_ ? dataset_->size() : regen_->records.size();
}

TrainSample DrafterData::load(size_t i) const {
  if (dataset_) return to_device(dataset_->load(i), device_);
  const datagen::RegenRecord& rec = regen_->records.at(i);
  TrainSample t;
  t.id = rec.id;
  t.tokens = rec.input_ids;
  t.loss_mask = rec.loss_mask;
  t.layers = int(layer_ids_.size());
  t.hidden_size = hidden_size_;
  const int64_t T = int64_t(rec.input_ids.size());
  torch::NoGradGuard ng;
  auto ids =
      torch::tensor(std::vector<int64_t>(rec.input_ids.begin(), rec.input_ids.end()), torch::kInt64)
          .view({1, T})
          .to(device_);
  LmOutput out = regen_->target->forward(ids, /*logits=*/false, layer_ids_);
  // taps come in layer order; the trainer's slots follow layer_ids_ (as a dataset's do).
  std::vector<torch::Tensor> slots;
  for (int id : layer_ids_) {
    int k = 0;
    for (int t : layer_ids_)
      if (t < id) ++k;
    slots.push_back(out.taps.at(size_t(k))[0]);
  }
  slots.push_back(out.final_hidden[0]);
  t.hidden = torch::stack(slots, 1).to(torch::kFloat32).contiguous();  // [T, layers + 1, H]
  return t;
}

}  // namespace dspark::train

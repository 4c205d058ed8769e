#include "train/drafter_samples.h"

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "core/crc32.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "datagen/regen_file.h"
#include "model/config.h"
#include "train/qwen3_model.h"

namespace dspark::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

TrainSample to_device(HiddenDataset::Sample s, const torch::Device& device) {
  TrainSample t;
  t.id = s.id;
  t.layers = s.layers;
  t.hidden_size = s.hidden;
  const std::vector<int64_t> shape{int64_t(s.tokens.size()), s.layers + 1, s.hidden};
  if (device.is_cpu()) {
    // No copy on the CPU: the tensor takes the sample's buffer and frees it with itself.
    auto states = std::make_shared<std::vector<float>>(std::move(s.hidden_states));
    t.hidden = torch::from_blob(
        states->data(), shape, [states](void*) {}, torch::kFloat32);
  } else {
    t.hidden = torch::from_blob(s.hidden_states.data(), shape, torch::kFloat32).to(device);
  }
  t.tokens = std::move(s.tokens);
  t.loss_mask = std::move(s.loss_mask);
  return t;
}

// Regenerated data is read through a map of the file: only each record's place stays in memory
// (24 bytes a record), so memory stays flat as the data grows; a record is parsed again when drawn.
struct DrafterData::Regenerated {
  struct Line {
    uint64_t offset = 0;
    uint64_t length = 0;
    int64_t number = 0;  // 1-based line number, for messages
  };
  MappedFile file;
  std::vector<Line> lines;
  CausalLM target{nullptr};
  int vocab = 0;

  std::string_view text(const Line& l) const {
    return {reinterpret_cast<const char*>(file.data()) + l.offset, size_t(l.length)};
  }
  // Every complete line parsed once: the format, unique ids, tokens inside the vocabulary.
  void index() {
    const std::string& path = file.path();
    const std::string_view all(reinterpret_cast<const char*>(file.data()), file.size());
    const uint64_t good = datagen::for_each_regen_record(
        all, path, [&](datagen::RegenRecord&& r, std::string_view line, int64_t number) {
          for (int32_t t : r.input_ids)
            if (t >= vocab)
              fail(path, ":", number, ": record id ", r.id, " holds token id ", t,
                   ", outside the --target's ", vocab, "-token vocabulary");
          lines.push_back({uint64_t(line.data() - all.data()), line.size(), number});
        });
    if (good < all.size())
      fail(path, ":", std::count(all.begin(), all.begin() + ptrdiff_t(good), '\n') + 1,
           ": the last line is incomplete (an interrupted dspark datagen regenerate); finish it "
           "before training");
    if (lines.empty()) fail(path, ": no records");
  }
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
  const ModelConfig cfg = ModelConfig::from_dir(target);
  r->vocab = cfg.vocab_size;
  r->file = MappedFile(path);
  r->index();
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
  return dataset_ ? dataset_->size() : regen_->lines.size();
}

TrainSample DrafterData::load(size_t i) const {
  if (dataset_) return to_device(dataset_->load(i), device_);
  const Regenerated::Line& line = regen_->lines.at(i);
  const datagen::RegenRecord rec =
      datagen::parse_regen_line(regen_->text(line), regen_->file.path(), line.number);
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

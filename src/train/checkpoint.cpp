#include "train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/crc32.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "core/safetensors.h"

namespace dspark::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* kWeights = "weights.safetensors";
const char* kOptimizer = "optimizer.pt";
const char* kState = "state.json";

std::string checkpoint_name(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "checkpoint-%09ld", long(step));
  return buf;
}

}  // namespace

void save_checkpoint(const std::string& run_dir, torch::nn::Module& model, torch::optim::Optimizer& opt,
                     const CheckpointState& state, int keep) {
  fs::create_directories(run_dir);
  const fs::path final_dir = fs::path(run_dir) / checkpoint_name(state.step);
  const fs::path tmp = fs::path(run_dir) / (checkpoint_name(state.step) + ".tmp");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  // Weights in f32 (the master copy), named as the module names them.
  SafetensorsWriter w;
  for (const auto& p : model.named_parameters()) {
    auto t = p.value().detach().to(torch::kCPU, torch::kFloat32).contiguous();  // a GPU run's too
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    w.add(p.key(), DType::F32, shape, t.data_ptr<float>());
  }
  w.write((tmp / kWeights).string());
  {
    torch::serialize::OutputArchive archive;
    opt.save(archive);
    archive.save_to((tmp / kOptimizer).string());
  }
  json s;
  s["step"] = state.step;
  s["tokens"] = state.tokens;
  s["extra"] = state.extra;
  s["crc32"] = {{kWeights, crc32_file((tmp / kWeights).string())}, {kOptimizer, crc32_file((tmp / kOptimizer).string())}};
  const std::string text = s.dump(2) + "\n";
  write_file_atomic((tmp / kState).string(), text.data(), text.size());
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  const std::string latest = checkpoint_name(state.step) + "\n";
  write_file_atomic((fs::path(run_dir) / "latest").string(), latest.data(), latest.size());
  // Drop older checkpoints beyond `keep`.
  std::vector<fs::path> all;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("checkpoint-", 0) == 0 && n.find(".tmp") == std::string::npos) all.push_back(e.path());
  }
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i + size_t(keep) < all.size(); ++i) fs::remove_all(all[i]);
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  const fs::path latest = fs::path(run_dir) / "latest";
  if (!fs::exists(latest)) return std::nullopt;
  std::string name = read_text_file(latest.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const fs::path dir = fs::path(run_dir) / name;
  if (name.empty() || !fs::exists(dir / kState))
    fail(latest.string(), ": names checkpoint '", name, "' which is missing or incomplete");
  return dir.string();
}

CheckpointState load_checkpoint(const std::string& checkpoint_dir, torch::nn::Module& model,
                                torch::optim::Optimizer& opt) {
  const fs::path dir(checkpoint_dir);
  const std::string state_path = (dir / kState).string();
  if (!fs::exists(state_path)) fail(checkpoint_dir, ": not a checkpoint (no ", kState, ")");
  json s = json::parse(read_text_file(state_path), nullptr, false);
  if (s.is_discarded() || !s.contains("step") || !s.contains("crc32"))
    fail(state_path, ": malformed checkpoint state");
  for (const char* f : {kWeights, kOptimizer}) {
    const std::string path = (dir / f).string();
    if (!fs::exists(path)) fail(path, ": missing from the checkpoint");
    const uint32_t want = s["crc32"].value(f, uint32_t(0));
    const uint32_t got = crc32_file(path);
    if (want != got)
      fail(path, ": corrupt or truncated checkpoint file (CRC32 ", got, ", the checkpoint recorded ", want, ")");
  }
  // Weights: every parameter must be present with the same shape.
  SafetensorsFile weights((dir / kWeights).string());
  torch::NoGradGuard ng;
  size_t matched = 0;
  for (auto& p : model.named_parameters()) {
    auto it = weights.tensors().find(p.key());
    if (it == weights.tensors().end()) fail(weights.path(), ": missing tensor '", p.key(), "'");
    const TensorView& t = it->second;
    std::vector<int64_t> shape(p.value().sizes().begin(), p.value().sizes().end());
    if (t.shape != shape || t.dtype != DType::F32)
      fail(weights.path(), ": tensor '", p.key(), "' has shape ", t.shape_str(), " ", dtype_name(t.dtype),
           ", the model expects F32 of another shape");
    p.value().copy_(torch::from_blob(const_cast<uint8_t*>(t.data), p.value().sizes(), torch::kFloat32));
    ++matched;
  }
  if (matched != weights.tensors().size())
    fail(weights.path(), ": holds ", weights.tensors().size(), " tensors, the model has ", matched);
  try {
    torch::serialize::InputArchive archive;
    archive.load_from((dir / kOptimizer).string());
    opt.load(archive);
  } catch (const c10::Error& e) {
    fail((dir / kOptimizer).string(), ": cannot load the optimizer state: ", e.what_without_backtrace());
  }
  CheckpointState st;
  st.step = s["step"].get<int64_t>();
  st.tokens = s.value("tokens", int64_t(0));
  st.extra = s.value("extra", json::object());
  return st;
}

json latest_checkpoint_config(const std::string& run_dir) {
  auto ck = latest_checkpoint(run_dir);
  if (!ck) return nullptr;
  const std::string state_path = (fs::path(*ck) / kState).string();
  json s = json::parse(read_text_file(state_path), nullptr, false);
  if (s.is_discarded() || !s.is_object()) fail(state_path, ": malformed checkpoint state");
  return s.value("extra", json::object());
}

namespace {

// A location as comparable text: absolute, normalised, without a trailing separator.
std::string location(const std::string& p) {
  if (p.empty()) return p;  // a path flag not given (an online run's --data, no --init)
  std::error_code ec;
  fs::path a = fs::weakly_canonical(fs::absolute(p), ec);
  if (ec) a = fs::absolute(p);
  a = a.lexically_normal();
  if (a.has_parent_path() && a.filename().empty()) a = a.parent_path();
  return a.string();
}

}  // namespace

void check_resume_config(const std::string& run_dir, const json& recorded, const json& now,
                         const std::vector<ResumeField>& fields) {
  if (!recorded.is_object()) return;
  for (const ResumeField& f : fields) {
    if (!recorded.contains(f.field) || !now.contains(f.field)) continue;
    const json& was = recorded[f.field];
    const json& is = now[f.field];
    const bool same = f.path && was.is_string() && is.is_string()
                          ? location(was.get<std::string>()) == location(is.get<std::string>())
                          : was == is;
    if (same) continue;
    std::string what = f.field + " was " + was.dump() + ", now " + is.dump();
    if (was.is_object() && is.is_object()) {  // a whole model config: name the keys that differ
      what = f.field + " differs in";
      for (const auto& [key, value] : is.items())
        if (!was.contains(key) || was[key] != value) what += " " + key;
      for (const auto& [key, value] : was.items())
        if (!is.contains(key)) what += " " + key;
    }
    fail("flag ", f.flag, " differs from the run being resumed in ", run_dir, " (", what, "); resume with the same ",
         f.flag, " or start a new run in another --out");
  }
}

CheckpointState start_or_resume(const std::string& run_dir, bool resume, bool refuse_existing,
                                torch::nn::Module& model, torch::optim::Optimizer& opt, std::string* resumed_from) {
  if (resume) {
    auto ck = latest_checkpoint(run_dir);
    if (!ck) fail(run_dir, ": --resume given but the run has no checkpoint");
    if (resumed_from) *resumed_from = *ck;
    return load_checkpoint(*ck, model, opt);
  }
  if (refuse_existing && latest_checkpoint(run_dir))
    fail(run_dir, ": holds checkpoints of an earlier run; pass --resume to continue it or choose another --out");
  return {};
}

}  // namespace dspark::train

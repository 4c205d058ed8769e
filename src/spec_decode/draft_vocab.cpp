#include "spec_decode/draft_vocab.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"
#include "core/mmap_file.h"
#include "core/safetensors.h"
#include "kernels/gemm.h"
#include "spec_decode/drafter_config.h"
#include "spec_decode/drafters.h"

namespace dspark {

namespace fs = std::filesystem;

std::vector<int32_t> choose_draft_vocab(std::span<const int64_t> primary,
                                        std::span<const int64_t> secondary,
                                        std::span<const uint8_t> allowed,
                                        std::span<const int32_t> always, int size) {
  const int V = int(primary.size());
  if (!secondary.empty() && int(secondary.size()) != V)
    fail("draft vocabulary: the two count tables differ in size");
  if (!allowed.empty() && int(allowed.size()) != V)
    fail("draft vocabulary: the allowed mask has the wrong size");
  const auto ok = [&](int v) { return allowed.empty() || allowed[size_t(v)] != 0; };
  int available = 0;
  for (int v = 0; v < V; ++v) available += ok(v);
  if (size < 1 || size > available)
    fail("draft vocabulary: size ", size, " is outside [1, ", available,
         "] (the ids the drafter can propose)");
  std::vector<uint8_t> chosen(size_t(V), 0);
  std::vector<int32_t> out;
  for (int32_t v : always) {
    if (v < 0 || v >= V)
      fail("draft vocabulary: token id ", v, " is outside the vocabulary (", V, ")");
    if (!ok(v) || chosen[size_t(v)]) continue;
    if (int(out.size()) == size)
      fail("draft vocabulary: size ", size, " cannot hold the ", always.size(), " ids always kept");
    chosen[size_t(v)] = 1;
    out.push_back(v);
  }
  std::vector<int32_t> rest;
  for (int v = 0; v < V; ++v)
    if (ok(v) && !chosen[size_t(v)]) rest.push_back(v);
  const auto second = [&](int v) { return secondary.empty() ? int64_t(0) : secondary[size_t(v)]; };
  std::stable_sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) {
    if (primary[size_t(a)] != primary[size_t(b)]) return primary[size_t(a)] > primary[size_t(b)];
    return second(a) > second(b);  // stable: lower ids first on full ties
  });
  for (size_t i = 0; int(out.size()) < size; ++i) out.push_back(rest[i]);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// The target ids a drafter's head scores: every id when it keeps the full head (no draft
// vocabulary, or a DSpark / DFlash one over a head of the target's rows), else its draft
// vocabulary.
struct HeadRows {
  bool full = true;
  int64_t rows = 0;             // rows of the head
  std::vector<int32_t> row_of;  // target id -> head row (-1: not scored)
};

HeadRows head_rows(DrafterConfig& dc, const TensorStore& store, int vocab) {
  const std::vector<int32_t> map = draft_vocab_map(dc, store, vocab);
  HeadRows h;
  h.full = map.empty() || dc.keeps_full_head;
  h.rows = h.full ? vocab : int64_t(map.size());
  h.row_of.assign(size_t(vocab), -1);
  if (h.full) {
    for (int v = 0; v < vocab; ++v) h.row_of[size_t(v)] = v;
  } else {
    for (size_t i = 0; i < map.size(); ++i) h.row_of[size_t(map[i])] = int32_t(i);
  }
  return h;
}

}  // namespace

std::vector<uint8_t> drafter_vocab_mask(const std::string& dir, int target_vocab) {
  DrafterConfig dc = DrafterConfig::load(dir);
  auto store = TensorStore::open_dir(dir);
  const std::vector<int32_t> map = draft_vocab_map(dc, *store, target_vocab);
  std::vector<uint8_t> mask(size_t(target_vocab), map.empty() ? 1 : 0);
  for (int32_t t : map) mask[size_t(t)] = 1;
  return mask;
}

std::vector<uint8_t> drafter_head_mask(const std::string& dir, int target_vocab) {
  DrafterConfig dc = DrafterConfig::load(dir);
  auto store = TensorStore::open_dir(dir);
  const HeadRows h = head_rows(dc, *store, target_vocab);
  std::vector<uint8_t> mask(size_t(target_vocab), 0);
  for (int v = 0; v < target_vocab; ++v) mask[size_t(v)] = h.row_of[size_t(v)] >= 0;
  return mask;
}

void write_reduced_drafter(const std::string& dir, const Model& target,
                           std::span<const int32_t> keep, const std::string& out_dir,
                           bool reduced_head) {
  if (fs::exists(out_dir) && fs::equivalent(dir, out_dir))
    fail(out_dir, ": write the reduced drafter to another directory than its source");
  DrafterConfig dc = DrafterConfig::load(dir);
  auto store = TensorStore::open_dir(dir);
  const int V = target.config().vocab_size;
  const HeadRows src = head_rows(dc, *store, V);
  const std::vector<int32_t>& row_of = src.row_of;
  const int64_t Vsrc = src.rows;
  // EAGLE-3 heads, and heads that hold only a draft vocabulary already, keep only the kept rows.
  const bool hard = reduced_head || dc.method == SpecMethod::Eagle3 || !src.full;
  if (keep.empty()) fail("draft vocabulary: no token ids to keep");
  for (size_t i = 0; i < keep.size(); ++i) {
    if (keep[i] < 0 || keep[i] >= V)
      fail("draft vocabulary: token id ", keep[i], " is outside the target vocabulary (", V, ")");
    if (i > 0 && keep[i] <= keep[i - 1])
      fail("draft vocabulary: the kept ids must be ascending and distinct");
    if (row_of[size_t(keep[i])] < 0)
      fail(dir, ": token id ", keep[i], " is not in the drafter's own draft vocabulary (", Vsrc,
           " ids)");
  }
  const int64_t Vd = int64_t(keep.size());
  if (!store->has("fc.weight")) fail(dir, ": the drafter has no 'fc.weight'");
  const DType stored = store->get("fc.weight").dtype;

  // Rows [Vsrc, cols] of tensor `name` at the kept ids, as f32.
  auto select_rows = [&](const std::string& name) {
    const TensorView& t = store->get(name);
    if (t.shape.size() != 2 || t.shape[0] != Vsrc)
      fail(t.file, ": tensor '", name, "' has shape ", t.shape_str(), "; expected ", Vsrc,
           " rows (the draft vocabulary)");
    const int64_t cols = t.shape[1];
    std::vector<float> rows(size_t(Vd * cols));
    const size_t row_bytes = size_t(cols) * dtype_size(t.dtype);
    for (int64_t i = 0; i < Vd; ++i)
      convert_to_f32(t.dtype, t.data + size_t(row_of[size_t(keep[size_t(i)])]) * row_bytes,
                     rows.data() + i * cols, size_t(cols));
    return std::pair{std::move(rows), cols};
  };

  SafetensorsWriter w;
  const std::string w2 = "markov_head.markov_w2.weight";
  for (const auto& [name, view] : store->tensors())
    if (name != "d2t" && name != "t2d" && (!hard || (name != "lm_head.weight" && name != w2)))
      w.add(name, view.dtype, view.shape, view.data);
  if (!hard) {
    // The full head stays; the engine copies the kept rows at load (see
    // DrafterConfig::keeps_full_head).
  } else if (store->has("lm_head.weight")) {
    auto [rows, cols] = select_rows("lm_head.weight");
    w.add_f32("lm_head.weight", {Vd, cols}, rows.data(), stored);
  } else {  // DSpark / DFlash on the target's head
    const WeightMatrix& head = target.lm_head();
    std::vector<float> rows(size_t(Vd) * size_t(head.k));
    for (int64_t i = 0; i < Vd; ++i)
      for (int64_t c = 0; c < head.k; ++c)
        rows[size_t(i * head.k + c)] = weight_at(head, keep[size_t(i)], c);
    w.add_f32("lm_head.weight", {Vd, int64_t(head.k)}, rows.data(), stored);
  }
  if (hard && store->has(w2)) {
    auto [rows, cols] = select_rows(w2);
    w.add_f32(w2, {Vd, cols}, rows.data(), store->get(w2).dtype);
  }
  std::vector<int64_t> d2t(static_cast<size_t>(Vd));
  std::vector<uint8_t> t2d(size_t(V), 0);
  for (int64_t i = 0; i < Vd; ++i) {
    d2t[size_t(i)] = keep[size_t(i)] - i;
    t2d[size_t(keep[size_t(i)])] = 1;
  }
  w.add("d2t", DType::I64, {Vd}, d2t.data());
  w.add("t2d", DType::BOOL, {int64_t(V)}, t2d.data());

  fs::create_directories(out_dir);
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (!e.is_regular_file() || n == "config.json" || n.ends_with(".safetensors") ||
        n == "model.safetensors.index.json")
      continue;
    fs::copy_file(e.path(), fs::path(out_dir) / n, fs::copy_options::overwrite_existing);
  }
  w.write((fs::path(out_dir) / "model.safetensors").string());
  nlohmann::json cfg =
      nlohmann::json::parse(read_text_file((fs::path(dir) / "config.json").string()));
  cfg["draft_vocab_size"] = Vd;
  const std::string text = cfg.dump(2) + "\n";
  write_file_atomic((fs::path(out_dir) / "config.json").string(), text.data(), text.size());
}

}  // namespace dspark

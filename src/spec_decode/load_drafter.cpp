#include <cstring>
#include <set>

#include "core/error.h"
#include "core/safetensors.h"
#include "kernels/gemm.h"
#include "spec_decode/dflash_backbone.h"
#include "spec_decode/drafter.h"
#include "spec_decode/drafters.h"

namespace dspark {

std::vector<int32_t> draft_vocab_map(DrafterConfig& dc, const TensorStore& store, int vocab) {
  if (!store.has("d2t")) {
    if (store.has("t2d")) fail(dc.path, ": the checkpoint has a 't2d' tensor but no 'd2t'");
    if (dc.draft_vocab_size > 0 && dc.draft_vocab_size != vocab)
      fail(dc.path, ": draft_vocab_size ", dc.draft_vocab_size, " differs from the target's vocabulary (", vocab,
           ") but there is no d2t tensor");
    dc.draft_vocab_size = 0;
    return {};
  }
  const TensorView& t = store.get("d2t");
  if (t.dtype != DType::I64 || t.shape.size() != 1)
    fail(t.file, ": tensor 'd2t' must be a 1-D I64 tensor, got ", dtype_name(t.dtype), " ", t.shape_str());
  const int64_t n = t.shape[0];
  if (dc.draft_vocab_size > 0 && n != dc.draft_vocab_size)
    fail(t.file, ": tensor 'd2t' has ", n, " entries but draft_vocab_size is ", dc.draft_vocab_size);
  if (n < 1 || n > vocab) fail(t.file, ": tensor 'd2t' has ", n, " entries; a draft vocabulary holds 1 to ", vocab);
  std::vector<int64_t> d2t(static_cast<size_t>(n));
  std::memcpy(d2t.data(), t.data, d2t.size() * 8);
  // Draft id i stands for target id i + d2t[i]; no two draft ids may name the same target id.
  std::vector<int32_t> map(static_cast<size_t>(n));
  std::vector<uint8_t> seen(size_t(vocab), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = i + d2t[size_t(i)];
    if (id < 0 || id >= vocab) fail(t.file, ": d2t maps draft id ", i, " to ", id, ", outside the target vocabulary");
    if (seen[size_t(id)]++) fail(t.file, ": d2t maps two draft ids to target id ", id);
    map[size_t(i)] = int32_t(id);
  }
  if (store.has("t2d")) {
    const TensorView& m = store.get("t2d");
    if (m.dtype != DType::BOOL || m.shape.size() != 1 || m.shape[0] != vocab)
      fail(m.file, ": tensor 't2d' must be a BOOL tensor of the target's ", vocab, " entries, got ", dtype_name(m.dtype), " ",
           m.shape_str());
    const auto* f = static_cast<const uint8_t*>(m.data);
    for (int v = 0; v < vocab; ++v)
      if (bool(f[v]) != bool(seen[size_t(v)]))
        fail(m.file, ": t2d marks target id ", v, f[v] ? " as" : " as not", " in the draft vocabulary, d2t says otherwise");
  }
  dc.draft_vocab_size = int(n);
  // EAGLE-3 heads always hold the draft vocabulary; a DSpark / DFlash head does when its own
  // lm_head has exactly those rows, else it is the full head (the target's, or one of its rows).
  const TensorView* head = store.has("lm_head.weight") ? &store.get("lm_head.weight") : nullptr;
  dc.keeps_full_head = dc.method != SpecMethod::Eagle3 && !(head && head->shape.size() == 2 && head->shape[0] == n);
  return map;
}

std::unique_ptr<Drafter> load_drafter(SpecConfig& sc, const Model& target, DType dtype) {
  const std::string where = "--speculative-config";
  if (sc.method == SpecMethod::Ngram) {
    return make_ngram_drafter(sc.prompt_lookup_min, sc.prompt_lookup_max, sc.num_speculative_tokens);
  }
  DrafterConfig dc = DrafterConfig::load(sc.model);
  // The JSON may omit 'method'; when given it must name what the drafter is.
  if (!sc.method_given) sc.method = dc.method;
  if (sc.method != dc.method)
    fail(where, ": field 'method' is ", spec_method_name(sc.method), " but ", dc.path, " describes a ",
         spec_method_name(dc.method), " drafter");
  const int most = dc.method == SpecMethod::DSpark ? dc.block_size
                   : dc.method == SpecMethod::DFlash ? dc.block_size - 1
                                                     : 64;
  if (sc.num_speculative_tokens == 0)
    sc.num_speculative_tokens = dc.speculative_tokens > 0 ? std::min(dc.speculative_tokens, most)
                                : dc.method == SpecMethod::Eagle3 ? 3 : most;
  if (sc.num_speculative_tokens > most)
    fail(where, ": field 'num_speculative_tokens' is ", sc.num_speculative_tokens, " but the ", spec_method_name(dc.method),
         " drafter at ", sc.model, " proposes at most ", most, " tokens per pass (block_size ", dc.block_size, ")");
  if (sc.confidence_threshold > 0 && !(dc.method == SpecMethod::DSpark && dc.confidence_head))
    fail(where, ": field 'dspark_confidence_threshold' needs a DSpark drafter with a confidence head; ", dc.path,
         " has none");
  if (sc.adaptive_verification && !(dc.method == SpecMethod::DSpark && dc.confidence_head))
    fail(where, ": field 'enable_adaptive_verification' needs a DSpark drafter with a confidence head; ", dc.path,
         " has none");
  if (dc.num_target_layers > 0 && dc.num_target_layers != target.config().num_layers)
    fail(dc.path, ": field 'num_target_layers' is ", dc.num_target_layers, " but the target has ",
         target.config().num_layers, " layers");

  if (sc.quantization == "int8") {
    // The int8 kernels read the AVX512-BF16 pair panels, which bf16 weights are packed into on such CPUs.
    if (dtype != DType::BF16)
      fail(where, ": field 'quantization' int8 quantizes bf16 drafter weights; this run loads ", dtype_name(dtype),
           " (drop the field, or run in bf16)");
    if (gemm_backend() != GemmBackend::Avx512Bf16)
      fail(where, ": field 'quantization' int8 needs the avx512bf16 matrix backend (a CPU with AVX512-BF16); this run uses ",
           gemm_backend_name(gemm_backend()));
    dc.int8_weights = true;
  }
  auto store = TensorStore::open_dir(sc.model);
  // Every tensor must be one the method uses.
  std::vector<std::string> known;
  if (dc.method == SpecMethod::Eagle3) {
    known = eagle3_names(dc);
  } else {
    known = dflash_backbone_names(dc);
    if (dc.method == SpecMethod::DSpark)
      for (auto& n : dspark_head_names(dc)) known.push_back(n);
  }
  std::set<std::string> allowed(known.begin(), known.end());
  for (const auto& [name, view] : store->tensors())
    if (!allowed.count(name))
      fail(view.file, ": unexpected tensor '", name, "' for a ", spec_method_name(dc.method), " drafter",
           "");
  std::vector<int32_t> to_target = draft_vocab_map(dc, *store, target.config().vocab_size);
  auto checkpoint = checkpoint_source(std::move(store));
  // A block format: every matrix whose rows are whole 32-weight blocks quantized on load (the
  // decoder layers held for the quantized kernels); the others stay in the run's dtype.
  std::unique_ptr<WeightSource> quantized;
  if (!sc.quantization.empty() && sc.quantization != "int8")
    quantized = quantizing_source(*checkpoint, *ggml_type_from_name(sc.quantization), nullptr, true);
  const WeightSource& src = quantized ? *quantized : *checkpoint;
  switch (dc.method) {
    case SpecMethod::DSpark: return make_dspark_drafter(dc, target, src, dtype, std::move(to_target));
    case SpecMethod::DFlash: return make_dflash_drafter(dc, target, src, dtype, std::move(to_target));
    case SpecMethod::Eagle3: return make_eagle3_drafter(dc, target, src, dtype, std::move(to_target));
    default: break;
  }
  fail("internal: no drafter for ", spec_method_name(dc.method));
}

}  // namespace dspark

#include "train/online_sample.h"

#include <cmath>
#include <sstream>

#include "connector/layer_ids.h"

namespace dspark::train {

namespace {

template <class T>
std::string list_text(const std::vector<T>& v, size_t limit = 64) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size() && i < limit; ++i) os << (i ? ", " : "") << v[i];
  if (v.size() > limit) os << ", ... (" << v.size() << " in all)";
  os << "]";
  return os.str();
}

}  // namespace

std::vector<int> store_layer_ids(const std::vector<int>& drafter_layers, int num_layers) {
  std::vector<int> out = connector::vllm_layers_from_dspark(drafter_layers);
  out.push_back(num_layers);
  return out;
}

datagen::HiddenDataset::Sample to_train_sample(const connector::HiddenSample& s,
                                               const std::vector<int32_t>& prompt_ids,
                                               const std::vector<int32_t>& generated_ids,
                                               const std::vector<int>& drafter_layers,
                                               const TargetNorm& norm) {
  const std::string where = "store sample '" + s.handle + "'";
  // The layers first: a server exporting other layers is a configuration error, not a bad sample.
  const std::vector<int> need = store_layer_ids(drafter_layers, norm.num_layers);
  std::vector<int> slot;  // the store slot of each needed layer
  for (int id : need) {
    int found = -1;
    for (size_t k = 0; k < s.layer_ids.size(); ++k)
      if (s.layer_ids[k] == id) found = int(k);
    if (found < 0)
      fail(where, ": field layer_ids is ", list_text(s.layer_ids), " but the drafter needs ",
           list_text(need), " (vLLM ids: each tapped 0-based layer + 1, then the target's depth ",
           norm.num_layers, " for the final state); serve with the drafter's layers");
    slot.push_back(found);
  }
  if (s.hidden != norm.hidden)
    fail(where, ": hidden size ", s.hidden, " differs from the target's ", norm.hidden,
         " (another target?)");
  if (norm.weight.size() != size_t(norm.hidden))
    fail("the target's model.norm.weight has ", norm.weight.size(), " values, hidden size is ",
         norm.hidden);
  // Token ids: the prompt, then every generated token but the last (which never went through a
  // forward pass).
  std::vector<int64_t> want(prompt_ids.begin(), prompt_ids.end());
  if (!generated_ids.empty())
    want.insert(want.end(), generated_ids.begin(), generated_ids.end() - 1);
  if (s.token_ids != want) {
    size_t at = 0;
    while (at < want.size() && at < s.token_ids.size() && s.token_ids[at] == want[at]) ++at;
    auto id_at = [](const std::vector<int64_t>& v, size_t i) {
      return i < v.size() ? std::to_string(v[i]) : std::string("(end)");
    };
    throw CorruptSample(where + ": token_ids (" + std::to_string(s.token_ids.size()) +
                        " ids) are not the response's prompt_token_ids ++ token_ids[:-1] (" +
                        std::to_string(want.size()) + " ids): first difference at index " +
                        std::to_string(at) + ", " + id_at(s.token_ids, at) + " instead of " +
                        id_at(want, at));
  }
  const int64_t T = s.num_tokens();
  const size_t n = s.layer_ids.size(), H = size_t(s.hidden);
  const size_t elem = s.dtype == "float32" ? 4 : s.dtype == "bfloat16" ? 2 : 0;
  if (elem == 0)
    throw CorruptSample(where + ": hidden_states dtype '" + s.dtype + "' (bfloat16 or float32)");
  if (s.hidden_bytes.size() != size_t(T) * n * H * elem)
    throw CorruptSample(where + ": hidden_states holds " + std::to_string(s.hidden_bytes.size()) +
                        " bytes, not [" + std::to_string(T) + ", " + std::to_string(n) + ", " +
                        std::to_string(H) + "] " + s.dtype);

  datagen::HiddenDataset::Sample out;
  out.tokens.assign(want.begin(), want.end());
  out.loss_mask.assign(size_t(T), 0);
  for (size_t t = prompt_ids.size(); t < size_t(T); ++t) out.loss_mask[t] = 1;
  const int taps = int(drafter_layers.size());
  out.layers = taps;
  out.hidden = s.hidden;
  out.hidden_states.resize(size_t(T) * size_t(taps + 1) * H);
  for (int64_t t = 0; t < T; ++t) {
    float* row = out.hidden_states.data() + size_t(t) * size_t(taps + 1) * H;
    for (int k = 0; k <= taps; ++k) s.row_f32(t, slot[size_t(k)], row + size_t(k) * H);
    // The last slot holds the pre-norm state: normalise it in place, as the target's final
    // RMSNorm does (x / sqrt(mean(x^2) + eps) * w, in f32).
    float* last = row + size_t(taps) * H;
    double ss = 0;
    for (size_t j = 0; j < H; ++j) ss += double(last[j]) * double(last[j]);
    const float r = float(1.0 / std::sqrt(ss / double(H) + double(norm.eps)));
    for (size_t j = 0; j < H; ++j) last[j] = last[j] * r * norm.weight[j];
  }
  return out;
}

}  // namespace dspark::train

#include "runtime/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/ops.h"

namespace dspark {

void Logprobs::clear() {
  token.clear();
  logprob.clear();
  rank.clear();
  top_token.clear();
  top_logprob.clear();
}

void Logprobs::append(const Logprobs& o) {
  if (o.empty()) return;
  if (empty()) top_n = o.top_n;
  if (o.top_n != top_n) fail("logprobs: appending ", o.top_n, " top entries to ", top_n);
  token.insert(token.end(), o.token.begin(), o.token.end());
  logprob.insert(logprob.end(), o.logprob.begin(), o.logprob.end());
  rank.insert(rank.end(), o.rank.begin(), o.rank.end());
  top_token.insert(top_token.end(), o.top_token.begin(), o.top_token.end());
  top_logprob.insert(top_logprob.end(), o.top_logprob.begin(), o.top_logprob.end());
}

void append_logprobs(const float* logits, int vocab, int32_t token, int top_n, Logprobs& out,
                     std::vector<float>& scratch) {
  if (token < 0 || token >= vocab) fail("logprobs: token ", token, " is outside the vocabulary");
  top_n = std::clamp(top_n, 0, std::min(kMaxLogprobs, vocab));
  if (out.empty()) out.top_n = top_n;
  if (out.top_n != top_n)
    fail("logprobs: ", top_n, " top entries where the others have ", out.top_n);
  const float chosen = logits[token];
  const float mx = max_value(logits, vocab);  // vectorised; NaNs skipped
  int32_t above = 0;
  for (int v = 0; v < vocab; ++v) above += logits[v] > chosen;
  // The top_n largest in a small sorted list. Once it is full, a block of 16 values with none
  // above its last entry (nearly all of them) costs one vectorisable compare each.
  int32_t ids[kMaxLogprobs];
  float vals[kMaxLogprobs];
  int kept = 0;
  constexpr int kBlock = 16;
  for (int v0 = 0; top_n > 0 && v0 < vocab; v0 += kBlock) {
    const int end = std::min(vocab, v0 + kBlock);
    if (kept == top_n && end - v0 == kBlock) {
      const float floor = vals[top_n - 1];
      const float* b = logits + v0;
      int over = 0;
      for (int j = 0; j < kBlock; ++j) over += b[j] > floor;
      if (over == 0) continue;
    }
    for (int v = v0; v < end; ++v) {
      const float x = logits[v];
      if (x != x || (kept == top_n && !(x > vals[top_n - 1]))) continue;  // NaN, or not in
      int at = kept < top_n ? kept++ : top_n - 1;
      while (at > 0 && x > vals[at - 1]) {
        vals[at] = vals[at - 1];
        ids[at] = ids[at - 1];
        --at;
      }
      vals[at] = x;
      ids[at] = int32_t(v);
    }
  }
  for (; kept < top_n; ++kept) {  // only when NaNs leave fewer than top_n values
    vals[kept] = -std::numeric_limits<float>::infinity();
    ids[kept] = 0;
  }
  if (scratch.size() < size_t(vocab)) scratch.resize(size_t(vocab));
  const double sum = exp_shifted(logits, vocab, mx, 1.f, scratch.data());
  const double lse = double(mx) + std::log(sum);
  out.token.push_back(token);
  out.logprob.push_back(float(double(chosen) - lse));
  out.rank.push_back(above + 1);
  for (int i = 0; i < top_n; ++i) {
    out.top_token.push_back(ids[i]);
    out.top_logprob.push_back(float(double(vals[i]) - lse));
  }
}

}  // namespace dspark

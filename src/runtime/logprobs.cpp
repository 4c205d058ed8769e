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

void append_logprobs(const float* logits, int vocab, int32_t token, int top_n, Logprobs& out) {
  if (token < 0 || token >= vocab) fail("logprobs: token ", token, " is outside the vocabulary");
  top_n = std::clamp(top_n, 0, std::min(kMaxLogprobs, vocab));
  if (out.empty()) out.top_n = top_n;
  if (out.top_n != top_n)
    fail("logprobs: ", top_n, " top entries where the others have ", out.top_n);
  const float chosen = logits[token];
  int above = 0;
  const float mx = max_value_and_count(logits, vocab, chosen, &above);  // NaNs skipped
  // The top_n largest in a small sorted list: filled from the first non-NaN values, then only
  // the values above its last entry (next_greater skips the rest, nearly all, a vector at a time).
  int32_t ids[kMaxLogprobs];
  float vals[kMaxLogprobs];
  int kept = 0;
  auto insert = [&](int v) {
    int at = kept < top_n ? kept++ : top_n - 1;
    while (at > 0 && logits[v] > vals[at - 1]) {
      vals[at] = vals[at - 1];
      ids[at] = ids[at - 1];
      --at;
    }
    vals[at] = logits[v];
    ids[at] = int32_t(v);
  };
  int v = 0;
  for (; v < vocab && kept < top_n; ++v)
    if (logits[v] == logits[v]) insert(v);
  while (top_n > 0 && (v = next_greater(logits, vocab, v, vals[top_n - 1])) < vocab) insert(v++);
  for (; kept < top_n; ++kept) {  // only when NaNs leave fewer than top_n values
    vals[kept] = -std::numeric_limits<float>::infinity();
    ids[kept] = 0;
  }
  const double lse = double(mx) + std::log(exp_sum(logits, vocab, mx));
  out.token.push_back(token);
  out.logprob.push_back(float(double(chosen) - lse));
  out.rank.push_back(above + 1);
  for (int i = 0; i < top_n; ++i) {
    out.top_token.push_back(ids[i]);
    out.top_logprob.push_back(float(double(vals[i]) - lse));
  }
}

}  // namespace dspark

// N-gram prompt lookup: find the latest earlier occurrence of the last n tokens (n from max
// down to min) in the sequence so far and propose the tokens that followed it. No model.
#include <algorithm>
#include <unordered_map>

#include "spec_decode/drafters.h"

namespace dspark {

namespace {

class NgramDrafter : public Drafter {
 public:
  NgramDrafter(int min_n, int max_n, int max_tokens) : min_n_(min_n), max_n_(max_n), max_tokens_(max_tokens) {}

  SpecMethod method() const override { return SpecMethod::Ngram; }
  const std::vector<int>& target_layers() const override { return none_; }
  int max_draft_tokens() const override { return max_tokens_; }

  int begin() override {
    int id = 0;
    while (seqs_.count(id)) ++id;
    seqs_[id].clear();
    return id;
  }
  void extend(int seq, std::span<const int32_t> tokens, int, const TargetFeatures&) override {
    auto& h = seqs_[seq];
    h.insert(h.end(), tokens.begin(), tokens.end());
  }
  void accept(int seq, std::span<const int32_t> committed, int, const TargetFeatures&) override {
    auto& h = seqs_[seq];
    h.insert(h.end(), committed.begin(), committed.end());
  }
  void end(int seq) override { seqs_.erase(seq); }
  // The context is the tokens: a cached prefix is as long as the target's.
  int attach_prefix(int seq, std::span<const int32_t> tokens, int max_len) override {
    auto& h = seqs_[seq];
    h.assign(tokens.begin(), tokens.begin() + std::min<ptrdiff_t>(max_len, ptrdiff_t(tokens.size())));
    return int(h.size());
  }

  void propose(int seq, int32_t anchor, int, int k, const DraftSampling&, Draft& out) override {
    out.clear();
    std::vector<int32_t>& h = seqs_[seq];
    h.push_back(anchor);  // temporarily: the text so far ends with the anchor
    const int len = int(h.size());
    for (int n = std::min(max_n_, len - 1); n >= min_n_ && out.tokens.empty(); --n) {
      // Latest start j < len - n whose n tokens equal the last n tokens.
      for (int j = len - n - 1; j >= 0; --j) {
        bool match = true;
        for (int t = 0; t < n && match; ++t) match = h[size_t(j + t)] == h[size_t(len - n + t)];
        if (!match) continue;
        for (int t = j + n; t < len && int(out.tokens.size()) < k; ++t) out.tokens.push_back(h[size_t(t)]);
        break;
      }
    }
    h.pop_back();
  }

 private:
  int min_n_, max_n_, max_tokens_;
  std::vector<int> none_;
  std::unordered_map<int, std::vector<int32_t>> seqs_;
};

}  // namespace

std::unique_ptr<Drafter> make_ngram_drafter(int min_n, int max_n, int max_tokens) {
  return std::make_unique<NgramDrafter>(min_n, max_n, max_tokens);
}

}  // namespace dspark

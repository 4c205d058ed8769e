// Rng: the one random generator (xoshiro256** whose state splitmix64 expands from one 64-bit
// word): small, seedable, splittable, and the same on every machine (std:: distributions are
// implementation-defined, so none is used). Sampling, verification, training and the corpus and
// prompt generators all draw from it.
#pragma once

#include <cstdint>
#include <vector>

namespace dspark {

// splitmix64: advances x by the golden gamma and returns the mixed word (Rng's seeding, and the
// one mixer wherever a 64-bit value must be spread: choice seeds, sampled exports, random weights).
inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  // Streams with different `stream` values are independent for the same seed.
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0)
      : Rng(Word{seed ^ (stream * 0xd1342543de82ef95ull + 0x632be59bd9b4e019ull)}) {}
  // The state splitmix64 expands from `x` as it is, no stream folded in: the corpus and prompt
  // generators seed this way (each mixes its own seed), so their committed outputs stay the same.
  static Rng from_word(uint64_t x) { return Rng(Word{x}); }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n), n > 0 (rejection keeps it exactly uniform).
  uint64_t below(uint64_t n) {
    const uint64_t limit = ~uint64_t(0) - (~uint64_t(0) % n);
    uint64_t v;
    do v = next();
    while (v >= limit);
    return v % n;
  }
  int64_t range(int64_t lo, int64_t hi) { return lo + int64_t(below(uint64_t(hi - lo) + 1)); }  // [lo, hi]
  bool chance(double p) { return uniform() < p; }  // true with probability p
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[size_t(below(v.size()))]; }

 private:
  struct Word {
    uint64_t x;
  };
  explicit Rng(Word w) {
    for (auto& v : s_) v = splitmix64(w.x);
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace dspark

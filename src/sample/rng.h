// Rng: a small, seedable, splittable random generator (xoshiro256**).
#pragma once

#include <cstdint>

namespace dspark {

class Rng {
 public:
  // Streams with different `stream` values are independent for the same seed.
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0) {
    uint64_t x = seed ^ (stream * 0xd1342543de82ef95ull + 0x632be59bd9b4e019ull);
    for (auto& v : s_) v = splitmix(x);
  }
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

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t s_[4];
};

}  // namespace dspark

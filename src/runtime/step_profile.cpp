#include "runtime/step_profile.h"


#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/error.h"
#include "core/buffer.h"
#include "core/cpu.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "model/forward.h"
#include "runtime/generate.h"
#include "core/rng.h"

namespace dspark {

namespace {

// Fills positions [0, len) of seq in every layer with small random values.
void fill_cache(KvCache& kv, int seq, int len, uint64_t seed) {
  kv.reserve(seq, len);
  kv.set_length(seq, len);
  const int blocks = (len + kKvBlock - 1) / kKvBlock;
  const int32_t* table = kv.block_table(seq);
  parallel_for(kv.n_layers(), [&](int l) {
    PagedKvLayer L = kv.layer(l);
    Rng rng(seed, uint64_t(l));
    const int64_t n = L.block_elems();
    const size_t esz = dtype_size(L.dtype);
    const bool fp8 = is_fp8(L.dtype);
    const float fp8_scale = fp8 ? 0.1f / fp8_max(L.dtype) : 1.f;  // values in +-0.1, as the others
    for (int b = 0; b < blocks * L.n_kv_heads; ++b) {
      const int h = b / blocks;
      const int32_t phys = table[b % blocks];
      for (void* base : {L.k, L.v}) {
        uint8_t* p = static_cast<uint8_t*>(base) + size_t(L.block_offset(h, phys)) * esz;
        for (int64_t i = 0; i < n; ++i) {
          float v = float(rng.uniform() - 0.5) * 0.2f;
          if (L.dtype == DType::BF16) reinterpret_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
          else if (fp8) p[i] = f32_to_fp8(v / fp8_scale, L.dtype);
          else reinterpret_cast<float*>(p)[i] = v;
        }
      }
      if (fp8)
        for (float* sc : {L.k_scale, L.v_scale})
          std::fill(sc + L.scale_offset(h, phys), sc + L.scale_offset(h, phys) + kKvBlock, fp8_scale);
    }
  });
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

__attribute__((target("avx2"))) uint64_t read_range_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  return uint64_t(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 3));
}

uint64_t read_range(const uint8_t* p, size_t n) {
  if (cpu_features().avx2) return read_range_avx2(p, n);
  uint64_t s = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    s += v;
  }
  return s;
}

}  // namespace

int64_t step_profile_bytes(const ModelConfig& c, const StepProfileOptions& opt, int prefill_tokens) {
  auto max_of = [](const std::vector<int>& v) { return v.empty() ? 0 : int64_t(*std::max_element(v.begin(), v.end())); };
  const int64_t max_ctx = max_of(opt.contexts), max_b = max_of(opt.batches), max_t = max_of(opt.tokens);
  const int64_t kv_token = KvCache::bytes_per_token(c.num_layers, c.num_kv_heads, c.head_dim, opt.kv_dtype);
  // Per batch row: logits, the residual stream and the widest layer activations (f32).
  const int64_t row = 4 * (int64_t(c.vocab_size) + 4 * int64_t(c.hidden_size) + 2 * int64_t(c.intermediate_size) +
                           c.q_dim() + 2 * c.kv_dim());
  const int64_t steps = max_b * (max_ctx + max_t + kKvBlock) * kv_token + max_b * max_t * row;
  const int64_t prefill = prefill_tokens > 0 ? (prefill_tokens + kKvBlock) * kv_token + 512 * row : 0;
  return std::max(steps, prefill);
}

void check_step_profile(const ModelConfig& c, const StepProfileOptions& opt, int prefill_tokens) {
  if (opt.contexts.empty() || opt.batches.empty() || opt.tokens.empty()) fail("step profile: contexts, batches and tokens must not be empty");
  for (const auto* v : {&opt.contexts, &opt.batches, &opt.tokens})
    for (int x : *v)
      if (x < 1) fail("step profile: contexts, batches and tokens must be >= 1, got ", x);
  if (opt.reps < 1) fail("step profile: reps must be >= 1, got ", opt.reps);
  const int64_t need = step_profile_bytes(c, opt, prefill_tokens);
  const int64_t have = physical_memory_bytes();
  if (have > 0 && need > have * 9 / 10)
    fail("step profile: the largest point needs ", double(need) / double(1 << 30), " GiB of KV cache and activations (",
         "max batch x (max context + max tokens) positions), more than the ", double(have) / double(1 << 30),
         " GiB of memory of this machine; lower --contexts or --batches");
}

std::vector<StepPoint> profile_steps(const Model& model, const StepProfileOptions& opt) {
  const ModelConfig& c = model.config();
  check_step_profile(c, opt, 0);
  const int max_ctx = *std::max_element(opt.contexts.begin(), opt.contexts.end());
  const int max_b = *std::max_element(opt.batches.begin(), opt.batches.end());
  const int max_t = *std::max_element(opt.tokens.begin(), opt.tokens.end());
  KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, opt.kv_dtype, int64_t(max_b) * (max_ctx + max_t + kKvBlock));
  Forward fwd(model, kv);
  std::vector<int> seqs;
  for (int i = 0; i < max_b; ++i) seqs.push_back(kv.create_sequence());
  std::vector<StepPoint> points;
  Rng rng(1234);
  ForwardRequest req;
  for (int ctx : opt.contexts) {
    for (int s : seqs) fill_cache(kv, s, ctx, uint64_t(s) + 17);
    struct Shape {
      int B, T;
      Batch batch;
    };
    std::vector<Shape> shapes;
    for (int B : opt.batches) {
      for (int T : opt.tokens) {
        Shape sh{B, T, {}};
        for (int s = 0; s < B; ++s)
          for (int t = 0; t < T; ++t)
            sh.batch.add(int32_t(rng.next() % uint64_t(c.vocab_size)), ctx + t, seqs[size_t(s)], true);
        shapes.push_back(std::move(sh));
      }
    }
    const size_t first = points.size();
    for (const Shape& sh : shapes) points.push_back(StepPoint{ctx, sh.B, sh.T, 0, {}});
    auto time_one = [&](size_t i, bool keep) {
      const Shape& sh = shapes[i];
      const double t0 = now_seconds();
      fwd.run(sh.batch, req);
      const double dt = now_seconds() - t0;
      if (keep) points[first + i].samples.push_back(dt);
      for (int s = 0; s < sh.B; ++s) kv.truncate(seqs[size_t(s)], ctx);
    };
    // The first run of a point warms caches and buffers and is not kept.
    if (opt.interleave) {
      for (int rep = 0; rep <= opt.reps; ++rep)
        for (size_t i = 0; i < shapes.size(); ++i) time_one(i, rep > 0);
    } else {
      for (size_t i = 0; i < shapes.size(); ++i)
        for (int rep = 0; rep <= opt.reps; ++rep) time_one(i, rep > 0);
    }
    for (size_t i = first; i < points.size(); ++i) points[i].seconds = median(points[i].samples);
  }
  return points;
}

double profile_prefill(const Model& model, int tokens, int chunk, DType kv_dtype) {
  const ModelConfig& c = model.config();
  KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, kv_dtype, tokens + kKvBlock);
  Forward fwd(model, kv);
  Rng rng(99);
  std::vector<int32_t> prompt(static_cast<size_t>(tokens));
  for (auto& t : prompt) t = int32_t(rng.next() % uint64_t(c.vocab_size));
  int seq = kv.create_sequence();
  prefill(fwd, seq, std::span<const int32_t>(prompt).first(size_t(std::min(tokens, chunk))), chunk);  // warm-up
  kv.truncate(seq, 0);
  const double t0 = now_seconds();
  prefill(fwd, seq, prompt, chunk);
  return tokens / (now_seconds() - t0);
}

size_t streamed_weight_bytes(const Model& model) {
  const ModelConfig& c = model.config();
  size_t n = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = model.layer(l);
    for (const WeightMatrix* w : {&L.qkv, &L.o, &L.gate_up, &L.down}) n += w->bytes();
  }
  return n + model.lm_head().bytes();
}

double measure_read_bandwidth(size_t bytes) {
  HugeBuffer buf(bytes);
  std::memset(buf.data(), 1, bytes);
  const auto* p = static_cast<const uint8_t*>(buf.data());
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    std::atomic<uint64_t> sink{0};
    const double t0 = now_seconds();
    const int n = num_threads();
    parallel_for(n, [&](int t) {
      const size_t per = bytes / size_t(n) / 128 * 128;
      sink += read_range(p + per * size_t(t), per);
    });
    const double dt = now_seconds() - t0;
    best = std::max(best, double(bytes) / dt);
  }
  return best;
}

}  // namespace dspark

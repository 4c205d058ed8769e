// oneDNN matmul backend. On CPUs with AMX or AVX512-BF16, oneDNN's JIT kernels run bf16
// weights at the matrix units' rate; activations are rounded to bf16 for those products.
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <tuple>

#include "core/buffer.h"
#include "core/error.h"
#include "kernels/gemm.h"

namespace dspark::detail {
namespace {

struct Key {
  int m, n, k;
  int64_t ldx, ldw, ldy;
  bool bf16, accumulate;
  auto tie() const { return std::tie(m, n, k, ldx, ldw, ldy, bf16, accumulate); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Prim {
  dnnl::matmul prim;
  dnnl::memory::desc src, wei, dst;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

const Prim& get_prim(const Key& key) {
  static std::mutex mu;
  static std::map<Key, Prim> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  using dt = dnnl::memory::data_type;
  dt act = key.bf16 ? dt::bf16 : dt::f32;
  Prim p;
  p.src = dnnl::memory::desc({key.m, key.k}, act, {key.bf16 ? key.k : key.ldx, 1});
  p.wei = dnnl::memory::desc({key.k, key.n}, act, {1, key.ldw});
  p.dst = dnnl::memory::desc({key.m, key.n}, dt::f32, {key.ldy, 1});
  dnnl::primitive_attr attr;
  if (key.accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.f);
    attr.set_post_ops(po);
  }
  try {
    dnnl::matmul::desc desc(p.src, p.wei, p.dst);
    dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
    p.prim = dnnl::matmul(pd);
  } catch (const dnnl::error& e) {
    fail("oneDNN cannot build a ", key.bf16 ? "bf16" : "f32", " matmul ", key.m, "x", key.k, "x", key.n,
         " on this CPU: ", e.what());
  }
  return cache.emplace(key, std::move(p)).first->second;
}

}  // namespace

void gemm_onednn(const float* x, int m, int64_t ldx, const WeightMatrix& w, float* y, int64_t ldy,
                 bool accumulate) {
  const bool bf16 = w.dtype == DType::BF16;
  Key key{m, w.n, w.k, ldx, w.ld, ldy, bf16, accumulate};
  const Prim& p = get_prim(key);
  thread_local Buffer<uint16_t> xb;
  void* src = const_cast<float*>(x);
  if (bf16) {
    xb.resize(size_t(m) * size_t(w.k));
    for (int i = 0; i < m; ++i) convert_f32_to_bf16(x + i * ldx, xb.data() + size_t(i) * w.k, size_t(w.k));
    src = xb.data();
  }
  static thread_local dnnl::stream stream(cpu_engine());
  dnnl::memory src_m(p.src, cpu_engine(), src);
  dnnl::memory wei_m(p.wei, cpu_engine(), const_cast<void*>(w.data));
  dnnl::memory dst_m(p.dst, cpu_engine(), y);
  p.prim.execute(stream, {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, wei_m}, {DNNL_ARG_DST, dst_m}});
  stream.wait();
}

}  // namespace dspark::detail

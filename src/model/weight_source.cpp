#include "model/weight_source.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/quant.h"

namespace dspark {

namespace {

void store_row(const float* src, int64_t n, DType dst_dtype, void* dst) {
  if (dst_dtype == DType::BF16) convert_f32_to_bf16(src, static_cast<uint16_t*>(dst), size_t(n));
  else std::memcpy(dst, src, size_t(n) * 4);
}

class CheckpointSource : public WeightSource {
 public:
  explicit CheckpointSource(std::unique_ptr<TensorStore> s) : store_(std::move(s)) {}
  bool has(const std::string& name) const override { return store_->has(name); }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [n, _] : store_->tensors()) out.push_back(n);
    return out;
  }
  std::string describe() const override { return store_->source(); }

  void read(const std::string& name, const std::vector<int64_t>& shape, DType dst_dtype, void* dst,
            int64_t dst_ld) const override {
    const TensorView& t = store_->get(name, shape);
    const int64_t cols = shape.empty() ? 1 : shape.back();
    const int64_t rows = cols ? t.numel() / cols : 0;
    const size_t src_esz = dtype_size(t.dtype), dst_esz = dtype_size(dst_dtype);
    const int64_t chunk = 256;
    parallel_for(int((rows + chunk - 1) / chunk), [&](int task) {
      std::vector<float> tmp(static_cast<size_t>(cols));
      for (int64_t r = task * chunk; r < std::min(rows, (task + 1) * chunk); ++r) {
        const uint8_t* src = t.data + size_t(r * cols) * src_esz;
        uint8_t* d = static_cast<uint8_t*>(dst) + size_t(r * dst_ld) * dst_esz;
        if (t.dtype == dst_dtype) {
          std::memcpy(d, src, size_t(cols) * dst_esz);
        } else {
          convert_to_f32(t.dtype, src, tmp.data(), size_t(cols));
          store_row(tmp.data(), cols, dst_dtype, d);
        }
      }
    });
  }

 private:
  std::unique_ptr<TensorStore> store_;
};

class QuantizingSource : public WeightSource {
 public:
  QuantizingSource(const WeightSource& inner, GgmlType type, std::map<std::string, GgmlType>* chosen, bool keep_odd,
                   std::string output)
      : inner_(inner), type_(type), chosen_(chosen), keep_odd_(keep_odd), output_(std::move(output)) {}
  bool has(const std::string& name) const override { return inner_.has(name); }
  std::vector<std::string> names() const override { return inner_.names(); }
  std::string describe() const override { return inner_.describe() + " quantized to " + ggml_type_name(type_); }

  std::optional<GgmlType> block_type(const std::string& name, const std::vector<int64_t>& shape) const override {
    if (shape.size() != 2 || skipped(shape[1])) return std::nullopt;
    const GgmlType t = type_for(name, shape[1]);
    if (chosen_) (*chosen_)[name] = t;
    return t;
  }

  void read_blocks(const std::string& name, const std::vector<int64_t>& shape, uint8_t* dst) const override {
    if (shape.size() != 2) fail("internal: only matrices are quantized");
    const int64_t rows = shape[0], cols = shape[1];
    const GgmlType t = type_for(name, cols);
    std::vector<float> full(size_t(rows * cols));
    inner_.read(name, shape, DType::F32, full.data(), cols);
    const size_t row_bytes = ggml_row_bytes(t, cols);
    parallel_for(int((rows + 63) / 64), [&](int task) {
      for (int64_t r = task * 64; r < std::min(rows, int64_t(task + 1) * 64); ++r)
        quantize_row(t, full.data() + size_t(r * cols), dst + size_t(r) * row_bytes, cols);
    });
    if (chosen_) (*chosen_)[name] = t;
  }

  void read(const std::string& name, const std::vector<int64_t>& shape, DType dst_dtype, void* dst,
            int64_t dst_ld) const override {
    if (shape.size() != 2 || skipped(shape[1])) return inner_.read(name, shape, dst_dtype, dst, dst_ld);
    const int64_t rows = shape[0], cols = shape[1];
    const GgmlType t = type_for(name, cols);
    std::vector<uint8_t> blocks(ggml_row_bytes(t, cols) * size_t(rows));
    read_blocks(name, shape, blocks.data());
    const size_t dst_esz = dtype_size(dst_dtype), row_bytes = ggml_row_bytes(t, cols);
    parallel_for(int((rows + 63) / 64), [&](int task) {
      std::vector<float> back(static_cast<size_t>(cols));
      for (int64_t r = task * 64; r < std::min(rows, int64_t(task + 1) * 64); ++r) {
        dequantize_row(t, blocks.data() + size_t(r) * row_bytes, back.data(), cols);
        store_row(back.data(), cols, dst_dtype, static_cast<uint8_t*>(dst) + size_t(r * dst_ld) * dst_esz);
      }
    });
  }

 private:
  // With keep_odd, a matrix whose rows are not whole 32-weight blocks is left as it is.
  bool skipped(int64_t cols) const { return keep_odd_ && cols % 32 != 0; }
  // The type a matrix with rows of `cols` weights is quantized to: a K-quant falls back to Q5_0
  // (as llama-quantize does) where the rows are not whole superblocks of 256.
  GgmlType type_for(const std::string& name, int64_t cols) const {
    if (name == output_ && type_ != GgmlType::Q8_0) return cols % 256 == 0 ? GgmlType::Q6_K : GgmlType::Q8_0;
    const GgmlType t = type_ == GgmlType::Q4_K && cols % 256 != 0 ? GgmlType::Q5_0 : type_;
    if (cols % 32 != 0)
      fail(inner_.describe(), ": tensor '", name, "' has rows of ", cols, " weights, not a multiple of 32: it cannot be quantized to ",
           ggml_type_name(t));
    return t;
  }

  const WeightSource& inner_;
  GgmlType type_;
  std::map<std::string, GgmlType>* chosen_;
  bool keep_odd_;
  std::string output_;
};

class RandomSource : public WeightSource {
 public:
  RandomSource(uint64_t seed, float std) : seed_(seed), std_(std) {}
  bool has(const std::string&) const override { return true; }
  std::vector<std::string> names() const override { return {}; }
  std::string describe() const override { return "random weights (seed " + std::to_string(seed_) + ")"; }

  void read(const std::string& name, const std::vector<int64_t>& shape, DType dst_dtype, void* dst,
            int64_t dst_ld) const override {
    uint64_t h = seed_ ^ 0x6a09e667f3bcc909ull;
    for (char c : name) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
    const bool norm = shape.size() == 1;
    const int64_t cols = shape.empty() ? 1 : shape.back();
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
    const size_t dst_esz = dtype_size(dst_dtype);
    parallel_for(int((rows + 63) / 64), [&](int task) {
      std::vector<float> tmp(static_cast<size_t>(cols));
      for (int64_t r = task * 64; r < std::min(rows, int64_t(task + 1) * 64); ++r) {
        uint64_t s = h + uint64_t(r) * 0x9e3779b97f4a7c15ull;
        for (int64_t c = 0; c < cols; c += 2) {  // Box-Muller pairs
          double u1 = (double(splitmix64(s) >> 11) + 0.5) * 0x1.0p-53;
          double u2 = double(splitmix64(s) >> 11) * 0x1.0p-53;
          double rad = std::sqrt(-2.0 * std::log(u1));
          float z0 = float(rad * std::cos(2 * M_PI * u2)), z1 = float(rad * std::sin(2 * M_PI * u2));
          tmp[size_t(c)] = norm ? 1.f + 0.1f * z0 : std_ * z0;
          if (c + 1 < cols) tmp[size_t(c + 1)] = norm ? 1.f + 0.1f * z1 : std_ * z1;
        }
        store_row(tmp.data(), cols, dst_dtype, static_cast<uint8_t*>(dst) + size_t(r * dst_ld) * dst_esz);
      }
    });
  }

 private:
  uint64_t seed_;
  float std_;
};

}  // namespace

std::unique_ptr<WeightSource> checkpoint_source(std::unique_ptr<TensorStore> store) {
  return std::make_unique<CheckpointSource>(std::move(store));
}

std::unique_ptr<WeightSource> quantizing_source(const WeightSource& inner, GgmlType type,
                                                std::map<std::string, GgmlType>* chosen, bool keep_odd,
                                                std::string output) {
  if (!can_quantize(type) || type == GgmlType::Q6_K)
    fail("quantization ", ggml_type_name(type), " is not written by dspark (q8_0, q4_0, q5_0, q4_k)");
  return std::make_unique<QuantizingSource>(inner, type, chosen, keep_odd, std::move(output));
}

std::unique_ptr<WeightSource> random_source(uint64_t seed, float std) {
  return std::make_unique<RandomSource>(seed, std);
}

}  // namespace dspark

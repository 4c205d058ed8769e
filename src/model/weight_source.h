// WeightSource: where a model's tensors come from (a checkpoint directory, or random values).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/safetensors.h"

namespace dspark {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // Writes the tensor, checked against `shape`, into dst as `dst_dtype` (F32 or BF16), row by row
  // with `dst_ld` elements between rows of the last dimension. Throws Error naming the tensor.
  virtual void read(const std::string& name, const std::vector<int64_t>& shape, DType dst_dtype, void* dst,
                    int64_t dst_ld) const = 0;
  virtual std::vector<std::string> names() const = 0;
  virtual std::string describe() const = 0;
  // The ggml block type matrix `name` of `shape` ([rows, cols]) has when the source holds it
  // quantized (a quantized GGUF tensor, or a matrix quantized on load), else nullopt (read() is
  // then the only way in).
  virtual std::optional<GgmlType> block_type(const std::string& name, const std::vector<int64_t>& shape) const {
    (void)name, (void)shape;
    return std::nullopt;
  }
  // The blocks of such a matrix, checked against `shape`: rows in HF order, each
  // ggml_row_bytes(type, cols) bytes, written to dst.
  virtual void read_blocks(const std::string& name, const std::vector<int64_t>& shape, uint8_t* dst) const {
    (void)shape, (void)dst;
    fail(describe(), ": tensor '", name, "' is not held in quantized blocks");
  }
};

// Tensors of an HF safetensors directory (or a single file).
std::unique_ptr<WeightSource> checkpoint_source(std::unique_ptr<TensorStore> store);
// `inner`'s tensors, each matrix (2-D) quantized to `type` row by row (quantize_row) and read back
// dequantized; vectors pass unchanged. A K-quant falls back to Q5_0 for rows that are not a
// multiple of 256 (llama-quantize's fallback). The type each matrix got is recorded in *chosen.
// A matrix whose rows are not a multiple of 32 is an Error naming it, or, with `keep_odd`, is
// read unquantized (a drafter's small heads). The matrix named `output` (the output head: the
// lm_head, or the embedding when it is tied) is kept at 6 bits where `type` has fewer, as
// llama-quantize keeps it: Q6_K, or Q8_0 where its rows are not a multiple of 256.
std::unique_ptr<WeightSource> quantizing_source(const WeightSource& inner, GgmlType type,
                                                std::map<std::string, GgmlType>* chosen, bool keep_odd = false,
                                                std::string output = "");
// Deterministic random tensors: N(0, std^2) for matrices, 1 + N(0, 0.1^2) for norm weights.
std::unique_ptr<WeightSource> random_source(uint64_t seed, float std = 0.02f);

}  // namespace dspark

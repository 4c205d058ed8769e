// Training precision: f32, or bf16 autocast (matrix products in bf16, f32 master weights and
// losses) where the CPU multiplies bf16 natively.
#pragma once

#include <torch/torch.h>

#include <string>

namespace dspark::train {

// "auto" (bf16 only with AVX512-BF16 or AMX), "f32" or "bf16"; anything else throws naming it.
// On a CUDA `device` the trainer runs in f32 ("auto" or "f32"; "bf16" throws): its autocast is
// the CPU's.
bool use_bf16(const std::string& precision, const torch::Device& device = torch::kCPU);

// --device: "cpu", or "cuda" / "cuda:N" where libtorch sees that GPU; anything else throws naming
// the flag.
torch::Device training_device(const std::string& name);

// A note for the log when `precision` asks for bf16 on a CPU without bf16 units (libtorch then
// emulates the bf16 products: the same bf16 rounding, many times slower than f32); else empty.
std::string precision_note(const std::string& precision);

// While alive (and `on`), libtorch's CPU autocast runs eligible ops in bf16.
class Bf16Autocast {
 public:
  explicit Bf16Autocast(bool on);
  ~Bf16Autocast();
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  bool on_;
};

}  // namespace dspark::train

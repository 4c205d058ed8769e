#include "train/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <optional>

#include "core/cpu.h"
#include "core/error.h"

namespace dspark::train {

bool use_bf16(const std::string& precision, const torch::Device& device) {
  if (!device.is_cpu()) {
    if (precision == "auto" || precision == "f32") return false;
    if (precision == "bf16")
      fail("flag --precision bf16: on --device ", device.str(), " the trainer runs in f32 (its bf16 autocast is the "
           "CPU's); use --precision auto or f32");
    fail("flag --precision must be auto, f32 or bf16, got '", precision, "'");
  }
  if (precision == "bf16") return true;
  if (precision == "f32") return false;
  if (precision != "auto") fail("flag --precision must be auto, f32 or bf16, got '", precision, "'");
  // bf16 autocast pays off only where the CPU multiplies bf16 natively.
  return cpu_features().avx512_bf16 || cpu_features().amx_bf16;
}

torch::Device training_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  if (name.rfind("cuda", 0) != 0)
    fail("flag --device must be cpu, cuda or cuda:N, got '", name, "'");
  std::optional<torch::Device> d;
  try {
    d = torch::Device(name);
  } catch (const c10::Error&) {
    fail("flag --device must be cpu, cuda or cuda:N, got '", name, "'");
  }
  if (!torch::cuda::is_available())
    fail("flag --device ", name, ": libtorch sees no CUDA device here (a CPU-only libtorch, or no GPU)");
  if (d->has_index() && d->index() >= int(torch::cuda::device_count()))
    fail("flag --device ", name, ": libtorch sees ", torch::cuda::device_count(), " CUDA device(s)");
  return *d;
}

std::string precision_note(const std::string& precision) {
  if (precision != "bf16" || cpu_features().avx512_bf16 || cpu_features().amx_bf16) return "";
  return "precision bf16: this CPU has no AVX512-BF16 or AMX, so libtorch emulates the bf16 products "
         "(bf16 rounding as on bf16 hardware, but far slower than f32; --precision auto picks f32 here)";
}

Bf16Autocast::Bf16Autocast(bool on) : on_(on) {
  if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(at::kCPU, true);  // libtorch 2.4 took the device type
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
#else
  at::autocast::set_cpu_enabled(true);
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
#endif
}

Bf16Autocast::~Bf16Autocast() {
  if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(at::kCPU, false);
#else
  at::autocast::set_cpu_enabled(false);
#endif
  at::autocast::clear_cache();
}

}  // namespace dspark::train

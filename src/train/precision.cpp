#include "train/precision.h"

#include <ATen/autocast_mode.h>

#include "core/cpu.h"
#include "core/error.h"

namespace dspark::train {

bool use_bf16(const std::string& precision) {
  if (precision == "bf16") return true;
  if (precision == "f32") return false;
  if (precision != "auto") fail("flag --precision must be auto, f32 or bf16, got '", precision, "'");
  // bf16 autocast pays off only where the CPU multiplies bf16 natively.
  return cpu_features().avx512_bf16 || cpu_features().amx_bf16;
}

std::string precision_note(const std::string& precision) {
  if (precision != "bf16" || cpu_features().avx512_bf16 || cpu_features().amx_bf16) return "";
  return "precision bf16: this CPU has no AVX512-BF16 or AMX, so libtorch emulates the bf16 products "
         "(bf16 rounding as on bf16 hardware, but far slower than f32; --precision auto picks f32 here)";
}

Bf16Autocast::Bf16Autocast(bool on) : on_(on) {
  if (!on_) return;
  at::autocast::set_cpu_enabled(true);
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
}

Bf16Autocast::~Bf16Autocast() {
  if (!on_) return;
  at::autocast::set_cpu_enabled(false);
  at::autocast::clear_cache();
}

}  // namespace dspark::train

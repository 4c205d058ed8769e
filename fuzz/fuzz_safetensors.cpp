// Fuzzes the safetensors header parser with whole files: it must either return views that lie
// inside the buffer or throw dspark::Error.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto tensors = dspark::parse_safetensors(data, size, "fuzz.safetensors");
    volatile uint8_t sink = 0;
    for (const auto& [name, t] : tensors) {
      if (t.nbytes == 0) continue;
      // Touch both ends: AddressSanitizer reports any view outside the input.
      sink = sink + t.data[0] + t.data[t.nbytes - 1];
      (void)t.numel();
      (void)t.shape_str();
    }
  } catch (const dspark::Error&) {
  }
  return 0;
}

// Fuzzes the GGUF reader with whole files: it must either return metadata and tensors that lie
// inside the buffer or throw dspark::Error.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "core/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const dspark::GgufContents c = dspark::parse_gguf(data, size, "fuzz.gguf");
    volatile uint8_t sink = 0;
    for (const dspark::GgufTensor& t : c.tensors) {
      // Touch both ends: AddressSanitizer reports any tensor outside the input.
      sink = sink + t.data[0] + t.data[t.nbytes - 1];
      (void)t.shape_str();
    }
    for (const auto& [key, v] : c.metadata) sink = sink + uint8_t(key.size() + v.strings.size() + v.integers.size());
  } catch (const dspark::Error&) {
  }
  return 0;
}

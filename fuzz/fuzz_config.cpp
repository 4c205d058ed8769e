// Fuzzes config.json validation: any JSON must give a usable config or a dspark::Error.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    dspark::ModelConfig c = dspark::ModelConfig::from_json(j, "fuzz/config.json");
    // A config that validates must have usable shapes.
    if (c.head_dim % 2 || c.num_heads % c.num_kv_heads) __builtin_trap();
    (void)c.rope_inv_freq();
    (void)c.num_parameters();
    (void)c.to_json().dump();
  } catch (const dspark::Error&) {
  }
  return 0;
}

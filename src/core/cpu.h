// CPU features detected once at start-up; kernels are chosen from these at run time.
#pragma once

#include <cstdint>
#include <string>

namespace dspark {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool amx_bf16 = false;
  std::string brand;

  std::string describe() const;  // e.g. "AMD EPYC (avx2 fma f16c)"
};

const CpuFeatures& cpu_features();

// Physical memory of this machine in bytes (0 if unknown).
int64_t physical_memory_bytes();

}  // namespace dspark

#include "core/cpu.h"

#include <cpuid.h>
#include <unistd.h>

#include <cstring>

namespace dspark {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  bool osxsave = c & (1u << 27);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  bool ymm_ok = (xcr0 & 0x6) == 0x6;
  bool zmm_ok = (xcr0 & 0xe6) == 0xe6;
  bool amx_ok = (xcr0 & (3ull << 17)) == (3ull << 17);
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = ymm_ok && (b & (1u << 5));
    f.avx512f = zmm_ok && (b & (1u << 16));
    f.avx512bw = zmm_ok && (b & (1u << 30));
    f.avx512vl = zmm_ok && (b & (1u << 31));
    f.avx512_vnni = zmm_ok && (c & (1u << 11));
    f.amx_bf16 = amx_ok && (d & (1u << 22));
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = zmm_ok && (a & (1u << 5));
  f.fma = f.fma && ymm_ok;
  f.f16c = f.f16c && ymm_ok;

  char brand[49] = {};
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002 + i, &a, &b, &c, &d);
      std::memcpy(brand + 16 * i, &a, 4);
      std::memcpy(brand + 16 * i + 4, &b, 4);
      std::memcpy(brand + 16 * i + 8, &c, 4);
      std::memcpy(brand + 16 * i + 12, &d, 4);
    }
  }
  f.brand = brand;
  while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
  return f;
}

}  // namespace

std::string CpuFeatures::describe() const {
  std::string s = brand.empty() ? "unknown CPU" : brand;
  s += " (";
  const char* sep = "";
  auto add = [&](bool on, const char* name) {
    if (on) {
      s += sep;
      s += name;
      sep = " ";
    }
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512_vnni, "avx512_vnni");
  add(avx512_bf16, "avx512_bf16");
  add(amx_bf16, "amx_bf16");
  s += ")";
  return s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? int64_t(pages) * int64_t(size) : 0;
}

}  // namespace dspark

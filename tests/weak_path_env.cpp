// The second run of a test binary on the weaker kernels: CMake registers test_kernels, test_spec
// and test_context_limit twice, the second time with DSPARK_TEST_WEAK_PATH=avx2 (which sets DSPARK_GEMM=avx2
// before any test runs, so Auto means avx2 in every test), so that
// a CPU with AVX512-BF16 (whose default backend is avx512bf16) also runs the AVX2 paths. On a
// CPU without it the default already is avx2 and the first run covered it: every test of the
// second run exits with code 77, which CTest reports as skipped (SKIP_RETURN_CODE), saying why.
// (GTEST_SKIP in an environment prints "Skipped" but counts the test as passed.)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/gemm.h"

namespace {

class WeakPathEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* weak = std::getenv("DSPARK_TEST_WEAK_PATH");
    if (!weak) return;
    if (std::string(weak) != "avx2") FAIL() << "DSPARK_TEST_WEAK_PATH must be avx2, got '" << weak << "'";
    if (!dspark::gemm_backend_available(dspark::GemmBackend::Avx512Bf16)) {
      std::printf("skipped: this CPU has no AVX512-BF16, so its default backend is avx2 and the plain run of these "
                  "tests covered the AVX2 paths\n");
      std::fflush(stdout);
      std::_Exit(77);
    }
    ::setenv("DSPARK_GEMM", "avx2", 1);
    dspark::set_gemm_backend(dspark::GemmBackend::Auto);
    if (dspark::gemm_backend() != dspark::GemmBackend::Avx2)
      FAIL() << "the AVX2 run should use avx2, but the backend is " << dspark::gemm_backend_name(dspark::gemm_backend());
  }
};

const auto* const kWeakPathEnvironment = ::testing::AddGlobalTestEnvironment(new WeakPathEnvironment);

}  // namespace

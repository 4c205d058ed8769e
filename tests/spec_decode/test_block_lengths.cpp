// The speculative settings whose length must match the block: the SPS curve covers every verify
// length, and a DSpark drafter's sts_temperatures hold one temperature per draft position.
#include <gtest/gtest.h>

#include <fstream>

#include "../error_of.h"
#include "core/error.h"
#include "fixtures.h"
#include "runtime/spec_generate.h"
#include "spec_decode/drafter.h"
#include "spec_decode/drafter_config.h"

namespace dspark {
namespace {

using namespace dspark::testing;

// A tiny random target and a DSpark drafter of block 4 for it.
struct BlockRig {
  fs::path dir = temp_dir("block_lengths");
  ModelConfig cfg = tiny_target(300);
  std::unique_ptr<Model> target = Model::build(cfg, *random_source(5, 0.3f), LoadOptions{DType::F32});
  std::string drafter = (dir / "dspark").string();

  BlockRig() {
    DrafterSpec s;
    s.block = 4;
    write_dspark(drafter, cfg, s);
  }
  ~BlockRig() { fs::remove_all(dir); }
};

// dspark_sps_curve gives the step rate for 1, 2, ... tokens: fewer than K + 1 entries are refused;
// more (batched steps, as `bench step --sps-out` writes them) are taken.
TEST(SpecConfig, SpsCurveMustCoverEveryVerifyLength) {
  BlockRig s;
  for (const std::string curve : {"[1, 0.5]", "[1, 0.5, 0.34, 0.25]"}) {
    SpecConfig sc = SpecConfig::parse(R"({"model": ")" + s.drafter +
                                      R"(", "num_speculative_tokens": 4, "enable_adaptive_verification": true, "dspark_sps_curve": )" +
                                      curve + "}");
    load_drafter(sc, *s.target, DType::F32);
    const std::string msg = error_of([&] { make_verify_policy(sc, *s.target, DType::F32); });
    EXPECT_NE(msg.find("field 'dspark_sps_curve' has"), std::string::npos) << curve << " -> " << msg;
    EXPECT_NE(msg.find("needs at least 5"), std::string::npos) << msg;
  }
  SpecConfig longer = SpecConfig::parse(R"({"model": ")" + s.drafter +
                                        R"(", "num_speculative_tokens": 4, "enable_adaptive_verification": true, "dspark_sps_curve": [1, 0.5, 0.34, 0.25, 0.2, 0.17, 0.15]})");
  load_drafter(longer, *s.target, DType::F32);
  EXPECT_NO_THROW(make_verify_policy(longer, *s.target, DType::F32));
  // A file written by `dspark bench step --sps-out`, named instead of the array.
  const std::string file = s.drafter + "/sps.json";
  std::ofstream(file) << R"({"cpu": "test", "dspark_sps_curve": [1, 0.5, 0.34, 0.25, 0.2, 0.17]})";
  SpecConfig from_file = SpecConfig::parse(R"({"model": ")" + s.drafter +
                                           R"(", "num_speculative_tokens": 4, "enable_adaptive_verification": true, "dspark_sps_curve": ")" +
                                           file + R"("})");
  EXPECT_EQ(from_file.sps_curve, (std::vector<double>{1, 0.5, 0.34, 0.25, 0.2, 0.17}));
  std::ofstream(file) << R"({"steps": []})";
  const std::string bad = error_of([&] {
    SpecConfig::parse(R"({"model": ")" + s.drafter + R"(", "enable_adaptive_verification": true, "dspark_sps_curve": ")" + file + R"("})");
  });
  EXPECT_NE(bad.find(file), std::string::npos) << bad;
  EXPECT_NE(bad.find("bench step --sps-out"), std::string::npos) << bad;
  SpecConfig ok = SpecConfig::parse(R"({"model": ")" + s.drafter +
                                    R"(", "num_speculative_tokens": 4, "enable_adaptive_verification": true, "dspark_sps_curve": [1, 0.5, 0.34, 0.25, 0.2]})");
  load_drafter(ok, *s.target, DType::F32);
  EXPECT_NO_THROW(make_verify_policy(ok, *s.target, DType::F32));
}

// sts_temperatures holds one temperature per draft position of the block.
TEST(DrafterConfigErrors, StsTemperaturesMustMatchTheBlock) {
  BlockRig s;
  const std::string path = (fs::path(s.drafter) / "config.json").string();
  json j = json::parse(std::ifstream(path));
  for (const json& temps : {json::array({1.0, 1.1}), json::array({1.0, 1.1, 1.2, 1.3, 1.4})}) {
    j["sts_temperatures"] = temps;
    std::ofstream(path) << j.dump();
    const std::string msg = error_of([&] { DrafterConfig::load(s.drafter); });
    EXPECT_NE(msg.find("field 'sts_temperatures' has " + std::to_string(temps.size()) + " entries"), std::string::npos) << msg;
  }
  j["sts_temperatures"] = json::array({1.0, 1.1, 1.2, 1.3});
  std::ofstream(path) << j.dump();
  EXPECT_EQ(DrafterConfig::load(s.drafter).sts_temperatures.size(), 4u);
}

}  // namespace
}  // namespace dspark

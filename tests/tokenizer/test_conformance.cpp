// Conformance of dspark_tokenizer with the reference JavaScript implementation on the real
// Qwen3 and Llama-3 tokenizer.json files. The cases come from conformance/gen_cases.mjs:
//
//   test_tokenizer_conformance MANIFEST.json [gtest flags]
//
// For every case: encode(text) must equal the JS ids; decode(ids) must equal the JS decode and
// the round-trip text (the input as the tokenizer normalizes it: NFC per added-token section
// for Qwen3, the input itself for Llama-3); StreamDecoder must agree with decode. Chat cases
// check apply_chat_template against the Jinja template run by the JS package.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

std::string g_manifest;
using nlohmann::json;
using Ids = std::vector<int32_t>;
using Clock = std::chrono::steady_clock;

std::string ids_str(const Ids& ids) { return json(ids).dump(); }
std::string q(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

struct Report {
  size_t failures = 0;
  std::ostringstream details;
  void add(const std::string& what) {
    if (++failures <= 25) details << "  " << what << "\n";
  }
};

TEST(TokenizerConformance, MatchesReferenceImplementation) {
  ASSERT_FALSE(g_manifest.empty()) << "usage: test_tokenizer_conformance MANIFEST.json";
  std::ifstream mf(g_manifest);
  ASSERT_TRUE(mf) << "cannot open " << g_manifest;
  const json manifest = json::parse(mf);
  std::printf("reference: Node %s (Unicode %s), seed %s\n", manifest["node"].get<std::string>().c_str(),
              manifest["unicode"].get<std::string>().c_str(), manifest["seed"].dump().c_str());
  size_t total_failures = 0;
  for (const json& v : manifest["variants"]) {
    const std::string name = v["name"];
    SCOPED_TRACE(name);
    const auto t0 = Clock::now();
    std::unique_ptr<dspark::Tokenizer> tok = dspark::Tokenizer::from_file(v["tokenizer_json"]);
    const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();

    std::ifstream in(v["cases"].get<std::string>());
    ASSERT_TRUE(in) << "cannot open " << v["cases"];
    std::vector<json> cases;
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) cases.push_back(json::parse(line));

    Report rep;
    size_t n_text = 0, n_special = 0, n_chat = 0, n_tokens = 0, n_bytes = 0;
    double encode_s = 0;
    for (const json& c : cases) {
      const std::string text = c["text"];
      const Ids want = c["ids"];
      if (c.contains("chat")) {
        ++n_chat;
        std::vector<dspark::ChatMessage> msgs;
        for (const json& m : c["chat"]) msgs.push_back({m["role"], m["content"]});
        const std::string got_text = dspark::apply_chat_template(dspark::detect_chat_format(*tok), msgs, true);
        if (got_text != text) rep.add("chat template: want " + q(text) + "\n    got  " + q(got_text));
        const Ids got = tok->encode(text, false);
        if (got != want) rep.add("chat encode " + q(text) + "\n    want " + ids_str(want) + "\n    got  " + ids_str(got));
        continue;
      }
      const bool special = c["special"];
      (special ? n_special : n_text)++;
      const auto e0 = Clock::now();
      const Ids got = tok->encode(text, special);
      encode_s += std::chrono::duration<double>(Clock::now() - e0).count();
      n_tokens += got.size();
      n_bytes += text.size();
      if (got != want) {
        rep.add(std::string(special ? "encode(add_special_tokens) " : "encode ") + q(text) + "\n    want " +
                ids_str(want) + "\n    got  " + ids_str(got));
        continue;
      }
      const std::string dec = tok->decode(want);
      if (dec != c["decoded"].get<std::string>())
        rep.add("decode " + ids_str(want) + "\n    want " + q(c["decoded"].get<std::string>()) + "\n    got  " + q(dec));
      if (!special && dec != c["roundtrip"].get<std::string>())
        rep.add("decode(encode(s)) != s for " + q(text) + "\n    want " + q(c["roundtrip"].get<std::string>()) + "\n    got  " + q(dec));
      const std::string dec_skip = tok->decode(want, true);
      if (dec_skip != c["decoded_skip"].get<std::string>())
        rep.add("decode(skip_special) " + ids_str(want) + "\n    want " + q(c["decoded_skip"].get<std::string>()) + "\n    got  " + q(dec_skip));
      dspark::StreamDecoder sd(*tok);
      std::string streamed;
      for (int32_t id : want) streamed += sd.push(id);
      streamed += sd.flush();
      if (streamed != dec) rep.add("StreamDecoder " + ids_str(want) + "\n    want " + q(dec) + "\n    got  " + q(streamed));
    }
    std::printf("%-22s %5zu texts + %4zu with special tokens + %3zu chats: %zu mismatches "
                "(load %.2fs, encode %.0f tokens/s, %.1f MB/s)\n",
                name.c_str(), n_text, n_special, n_chat, rep.failures, load_s, n_tokens / encode_s,
                n_bytes / encode_s / 1e6);
    EXPECT_EQ(rep.failures, 0u) << name << ": " << rep.failures << " mismatches (first 25):\n" << rep.details.str();
    EXPECT_GE(n_text + n_special + n_chat, 100u) << "too few cases in " << v["cases"];
    total_failures += rep.failures;
  }
  EXPECT_GE(manifest["variants"].size(), 2u);
  EXPECT_EQ(total_failures, 0u);
}

// Encode speed on one long prompt made of the cases' texts (not a correctness check).
TEST(TokenizerConformance, LongPromptSpeed) {
  ASSERT_FALSE(g_manifest.empty());
  std::ifstream mf(g_manifest);
  const json manifest = json::parse(mf);
  for (const json& v : manifest["variants"]) {
    const std::string name = v["name"];
    if (name != "qwen3" && name != "llama3") continue;
    auto tok = dspark::Tokenizer::from_file(v["tokenizer_json"]);
    std::ifstream in(v["cases"].get<std::string>());
    std::string prompt;
    for (std::string line; std::getline(in, line) && prompt.size() < 600000;)
      if (!line.empty()) prompt += json::parse(line)["text"].get<std::string>() + "\n";
    const auto t0 = Clock::now();
    const Ids ids = tok->encode(prompt);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("%-8s long prompt: %zu bytes -> %zu tokens in %.3fs (%.0f tokens/s)\n", name.c_str(), prompt.size(),
                ids.size(), s, ids.size() / s);
    EXPECT_GT(ids.size(), 100000u);
    EXPECT_LT(s, 3.0);
    if (name == "llama3") {
      EXPECT_EQ(tok->decode(ids), prompt);  // no normalizer: exact round trip
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc > 1) g_manifest = argv[1];
  return RUN_ALL_TESTS();
}

// Corpus builds: synthetic sources for every domain, the real Python standard library plus
// generated math for determinism, deduplication, split disjointness, manifest CRC32s, ChatML
// instruction turns, evaluation prompts and package errors.
#include <gtest/gtest.h>
#include <zlib.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "core/error.h"
#include "data/compress.h"
#include "data/corpus.h"
#include "data/system.h"
#include "data/text_util.h"
#include "test_util.h"

namespace dspark::data {
namespace {

using nlohmann::json;
using testing::jsonl_texts;
using testing::slurp;
using testing::TempDir;

const char kPy[] =
    "\"\"\"A small module.\"\"\"\n\nimport os\n\n"
    "def add_numbers(a, b):\n    \"\"\"Return the sum of two numbers.\"\"\"\n    total = a + b\n    return total\n\n"
    "def shout(text, times=1):\n    \"\"\"Make the given text loud and repeat it.\"\"\"\n    return (text.upper() + '!') * times\n";

// Synthetic sources for every domain under one temporary directory.
struct Synthetic {
  TempDir t;
  CorpusOptions opt;
  Synthetic() {
    const std::string py = t.sub("python");
    t.write("python/mod_a.py", kPy);
    // The same text with other whitespace: a duplicate after normalisation.
    t.write("python/pkg/mod_copy.py", std::string(kPy) + "\n\n   \n");
    t.write("python/encodings/cp999.py", "\"\"\" Python Character Mapping Codec generated with gencodec.py.\n\"\"\"\n");
    t.write("python/test/test_a.py", "def test_x():\n    \"\"\"A test of things here.\"\"\"\n    assert True\n");
    for (int i = 0; i < 30; ++i)
      t.write("python/gen/m" + std::to_string(i) + ".py",
              "def func_" + std::to_string(i) + "(x):\n    \"\"\"Compute value number " + std::to_string(i) +
                  " from x.\"\"\"\n    return x * " + std::to_string(i) + "\n");

    const std::string dictd = t.sub("dictd");
    std::vector<std::pair<std::vector<std::string>, std::string>> g;
    for (int i = 0; i < 40; ++i) {
      const std::string w = "Word" + std::to_string(i);
      g.push_back({{w}, w + " \\" + w + "\\, n.\n   1. The thing called " + w + " in tests.\n   [1913 Webster]\n"});
    }
    auto [gi, gd] = testing::make_dictd(g);
    t.write("dictd/gcide.index", gi);
    write_gzip_file(dictd + "/gcide.dict.dz", gd);
    std::vector<std::pair<std::vector<std::string>, std::string>> de, en;
    for (int i = 0; i < 30; ++i) {
      de.push_back({{"Haus" + std::to_string(i)}, "Haus" + std::to_string(i) + " /haʊs/ <neut, n, sg>\nhouse " +
                                                      std::to_string(i) + " <n>\n"});
      en.push_back({{"house" + std::to_string(i)}, "house" + std::to_string(i) + " /haʊs/\nHaus " + std::to_string(i) +
                                                       " <neut>\n      \"my house\"  - mein Haus\n"});
    }
    de.push_back({{"Haus0x"}, "Haus0 /haʊs/ <neut, n, sg>\nhouse 0 <n>\n"});  // same entry again
    auto [di, dd] = testing::make_dictd(de);
    t.write("dictd/freedict-deu-eng.index", di);
    write_gzip_file(dictd + "/freedict-deu-eng.dict.dz", dd);
    auto [ei, ed] = testing::make_dictd(en);
    t.write("dictd/freedict-eng-deu.index", ei);
    write_gzip_file(dictd + "/freedict-eng-deu.dict.dz", ed);

    const std::string info = t.sub("info");
    std::string manual = "This is frob.info.\n\x1f\nFile: frob.info,  Node: Top,  Next: One,  Up: (dir)\n\nGNU Frob\n********\n\n";
    for (int i = 0; i < 5; ++i)
      manual += "\x1f\nFile: frob.info,  Node: Part " + std::to_string(i) + ",  Up: Top\n\n" + std::to_string(i) +
                " Part\n******\n\n" + std::string(250, char('a' + i)) + "\n";
    write_gzip_file(info + "/frob.info.gz", manual);

    std::string bible = "Holy Bible.\n";
    for (int c = 1; c <= 5; ++c)
      for (int v = 1; v <= 3; ++v)
        bible += "Ge" + std::to_string(c) + ":" + std::to_string(v) + " And it was so, chapter " + std::to_string(c) +
                 " verse " + std::to_string(v) + ".\n";
    t.write("bible.data", testing::make_brs_file(bible, 256));

    opt.out_dir = t.path() + "/out";
    opt.use_packages = false;
    opt.install = false;
    opt.python_dir = py;
    opt.dictd_dir = dictd;
    opt.info_dir = info;
    opt.bible_path = t.path() + "/bible.data";
    opt.max_mb = 0.3;
    opt.seed = 3;
  }
};

json manifest_of(const std::string& dir) { return json::parse(slurp(dir + "/manifest.json")); }

std::vector<std::string> all_texts(const std::string& dir, const std::string& domain) {
  std::vector<std::string> out;
  for (const auto& s : corpus_splits()) {
    const auto v = jsonl_texts(dir + "/" + domain + "/" + s + ".jsonl");
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

class SyntheticCorpus : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_ = new Synthetic();
    result_ = build_corpus(s_->opt);
  }
  static void TearDownTestSuite() {
    delete s_;
    s_ = nullptr;
  }
  static Synthetic* s_;
  static CorpusResult result_;
};
Synthetic* SyntheticCorpus::s_ = nullptr;
CorpusResult SyntheticCorpus::result_;

TEST_F(SyntheticCorpus, EveryDomainFromItsSources) {
  const std::string out = s_->opt.out_dir;
  ASSERT_EQ(result_.domains.size(), 5u);
  // Code: the module once (its whitespace twin is a duplicate), no generated or test files.
  const auto code = all_texts(out, "code");
  int with_add = 0;
  for (const auto& t : code) {
    with_add += t.find("def add_numbers") != std::string::npos;
    EXPECT_EQ(t.find("gencodec"), std::string::npos);
    EXPECT_EQ(t.find("def test_x"), std::string::npos);
  }
  EXPECT_EQ(with_add, 1);
  EXPECT_EQ(code.size(), 31u);
  // Prose: GCIDE entries, Bible chapters and info nodes.
  const auto prose = all_texts(out, "prose");
  std::set<std::string> firsts;
  for (const auto& t : prose) firsts.insert(t.substr(0, t.find('\n')));
  EXPECT_TRUE(firsts.count("Genesis 3"));
  EXPECT_TRUE(firsts.count("GNU Frob: Part 2"));
  EXPECT_TRUE(firsts.count("Word7, n."));
  EXPECT_EQ(prose.size(), 40u + 5u + 5u);
  // Translation: the duplicated article appears once.
  const auto tr = all_texts(out, "translation");
  EXPECT_EQ(tr.size(), 60u);
  int house0 = 0;
  for (const auto& t : tr) house0 += t.find("Haus0") != std::string::npos && t.find("house 0") != std::string::npos;
  EXPECT_EQ(house0, 1);
  // Math fills its cap.
  int64_t math_bytes = 0;
  for (const auto& t : all_texts(out, "math")) math_bytes += int64_t(t.size());
  EXPECT_GT(math_bytes, 290000);
  EXPECT_LE(math_bytes, 300000);
}

TEST_F(SyntheticCorpus, DeduplicatedAndSplitsDisjoint) {
  const std::string out = s_->opt.out_dir;
  for (const auto& d : corpus_domains()) {
    std::map<uint64_t, int> seen;  // normalized hash -> split
    for (int s = 0; s < 3; ++s)
      for (const auto& t : jsonl_texts(out + "/" + d + "/" + corpus_splits()[size_t(s)] + ".jsonl")) {
        const uint64_t h = normalized_hash(t);
        EXPECT_FALSE(seen.count(h)) << d << ": duplicate document\n" << t;
        seen[h] = s;
        if (d != "instructions") {
          EXPECT_EQ(split_of(h, domain_holdout_percent(d)), s) << d << "\n" << t;
        }
      }
  }
  // Proportions on the largest domain: about 98/1/1.
  const auto m = manifest_of(out);
  for (const auto& d : m["domains"])
    if (d["name"] == "math") {
      const double train = d["splits"]["train"]["documents"], val = d["splits"]["validation"]["documents"],
                   test = d["splits"]["test"]["documents"];
      const double all = train + val + test;
      EXPECT_GT(all, 1000);
      EXPECT_NEAR(val / all, 0.01, 0.007);
      EXPECT_NEAR(test / all, 0.01, 0.007);
    }
}

TEST_F(SyntheticCorpus, ManifestCrcsAndCountsMatchTheFiles) {
  const std::string out = s_->opt.out_dir;
  const auto m = manifest_of(out);
  EXPECT_EQ(m["seed"], 3);
  ASSERT_EQ(m["domains"].size(), 5u);
  size_t files = 0;
  for (const auto& [rel, f] : m["files"].items()) {
    const std::string bytes = slurp(out + "/" + rel);
    const uLong crc = ::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), uInt(bytes.size()));
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08lx", crc);
    EXPECT_EQ(f["crc32"].get<std::string>(), hex) << rel;
    EXPECT_EQ(f["bytes"].get<size_t>(), bytes.size()) << rel;
    ++files;
  }
  EXPECT_EQ(files, 5u * 4u);  // three splits and the prompts per domain
  for (const auto& d : m["domains"]) {
    for (const auto& s : corpus_splits()) {
      const auto& js = d["splits"][s];
      const auto texts = jsonl_texts(out + "/" + js["file"].get<std::string>());
      int64_t bytes = 0;
      for (const auto& t : texts) bytes += int64_t(t.size());
      EXPECT_EQ(js["documents"].get<size_t>(), texts.size());
      EXPECT_EQ(js["bytes"].get<int64_t>(), bytes);
    }
    EXPECT_FALSE(d["sources"].empty());
    for (const auto& src : d["sources"]) EXPECT_TRUE(src.contains("licence")) << src.dump();
  }
}

TEST_F(SyntheticCorpus, InstructionsAreChatML) {
  const std::string out = s_->opt.out_dir;
  static const std::regex turn(
      "<\\|im_start\\|>user\n([\\s\\S]*)<\\|im_end\\|>\n<\\|im_start\\|>assistant\n([\\s\\S]*)<\\|im_end\\|>\n");
  std::map<std::string, int> kinds;
  for (const auto& t : all_texts(out, "instructions")) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(t, m, turn)) << t;
    const std::string user = m[1], assistant = m[2];
    EXPECT_EQ(user.find("<|im_"), std::string::npos) << t;
    EXPECT_EQ(assistant.find("<|im_"), std::string::npos) << t;
    EXPECT_FALSE(user.empty());
    EXPECT_FALSE(assistant.empty());
    if (assistant.find("Answer: ") != std::string::npos) ++kinds["math"];
    else if (assistant.find("```python\n") == 0) ++kinds["code"];
    else if (user.find("Word") != std::string::npos) ++kinds["define"];
    else if (user.find("Haus") != std::string::npos || user.find("house") != std::string::npos) ++kinds["translate"];
    else ADD_FAILURE() << "unexpected turn:\n" << t;
  }
  EXPECT_GT(kinds["math"], 0);
  EXPECT_GT(kinds["code"], 0);
  EXPECT_GT(kinds["define"], 0);
  EXPECT_GT(kinds["translate"], 0);
  // Code turns hold a whole function from the sources.
  bool write = false;
  for (const auto& t : all_texts(out, "instructions"))
    if (t.find("`add_numbers(a, b)`") != std::string::npos) {
      write = true;
      EXPECT_NE(t.find("```python\ndef add_numbers(a, b):\n    \"\"\"Return the sum of two numbers.\"\"\"\n    total = a + b\n"
                       "    return total\n```<|im_end|>"),
                std::string::npos)
          << t;
    }
  EXPECT_TRUE(write);
}

TEST_F(SyntheticCorpus, PromptsComeFromTheTestSplit) {
  const std::string out = s_->opt.out_dir;
  const auto test_docs = jsonl_texts(out + "/math/test.jsonl");
  const auto prompts = testing::lines_of(slurp(out + "/prompts/math.jsonl"));
  EXPECT_EQ(int64_t(prompts.size()), std::min<int64_t>(100, int64_t(test_docs.size())));
  for (const auto& line : prompts) {
    const json p = json::parse(line);
    EXPECT_EQ(p["domain"], "math");
    const std::string doc_prefix = "Question: " + p["prompt"].get<std::string>() + "\n\nSolution:\n";
    bool found = false;
    for (const auto& d : test_docs)
      if (d.rfind(doc_prefix, 0) == 0) {
        found = true;
        EXPECT_EQ(d.substr(d.rfind("\nAnswer: ") + 9), p["reference"].get<std::string>());
      }
    EXPECT_TRUE(found) << p.dump();
  }
  // Instruction prompts are the user turns of test-split turns.
  const auto instr_test = jsonl_texts(out + "/instructions/test.jsonl");
  for (const auto& line : testing::lines_of(slurp(out + "/prompts/instructions.jsonl"))) {
    const json p = json::parse(line);
    EXPECT_NE(std::find(instr_test.begin(), instr_test.end(),
                        chatml(p["prompt"].get<std::string>(), p["reference"].get<std::string>())),
              instr_test.end());
  }
}

TEST(Corpus, DomainsFilterAndBadOptions) {
  Synthetic s;
  s.opt.domains = {"translation"};
  const auto r = build_corpus(s.opt);
  ASSERT_EQ(r.domains.size(), 1u);
  EXPECT_EQ(r.domains[0].name, "translation");
  EXPECT_FALSE(std::filesystem::exists(s.opt.out_dir + "/math/train.jsonl"));
  s.opt.domains = {"poetry"};
  try {
    build_corpus(s.opt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("poetry"), std::string::npos);
  }
}

// The real Python standard library (read through dpkg's file lists) plus generated math.
bool stdlib_installed() { return query_package("libpython3.11-stdlib").installed; }

std::map<std::string, std::string> files_of(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[std::filesystem::relative(e.path(), dir).string()] = slurp(e.path().string());
  return out;
}

TEST(Corpus, SameSeedSameBytesOtherSeedOtherBytes) {
  if (!stdlib_installed()) GTEST_SKIP() << "libpython3.11-stdlib is not installed";
  TempDir t;
  CorpusOptions o;
  o.domains = {"code", "math"};
  o.max_mb = 0.2;
  o.install = false;
  o.seed = 7;
  o.out_dir = t.path() + "/a";
  build_corpus(o);
  o.out_dir = t.path() + "/b";
  build_corpus(o);
  o.seed = 8;
  o.out_dir = t.path() + "/c";
  build_corpus(o);
  const auto a = files_of(t.path() + "/a"), b = files_of(t.path() + "/b"), c = files_of(t.path() + "/c");
  ASSERT_EQ(a.size(), 9u);
  EXPECT_TRUE(a == b) << "same seed, different bytes";
  EXPECT_NE(a.at("math/train.jsonl"), c.at("math/train.jsonl"));
  EXPECT_NE(a.at("code/train.jsonl"), c.at("code/train.jsonl"));
  const json m = manifest_of(t.path() + "/a");
  const auto& code = m["domains"][0];
  EXPECT_EQ(code["name"], "code");
  EXPECT_EQ(code["sources"][0]["packages"][0]["package"], "libpython3.11-stdlib");
  EXPECT_EQ(code["sources"][0]["packages"][0]["version"], query_package("libpython3.11-stdlib").version);
  EXPECT_EQ(code["sources"][0]["licence"], "PSF-2.0");
  // About 0.2 MB of Python files, none of them tests.
  int64_t bytes = 0;
  for (const auto& s : corpus_splits()) bytes += code["splits"][s]["bytes"].get<int64_t>();
  EXPECT_GT(bytes, 100000);
  EXPECT_LE(bytes, 200000);
}

TEST(Corpus, RerunIsUpToDateAndRepairsDamage) {
  if (!stdlib_installed()) GTEST_SKIP() << "libpython3.11-stdlib is not installed";
  TempDir t;
  CorpusOptions o;
  o.domains = {"code", "math"};
  o.max_mb = 0.1;
  o.install = false;
  o.out_dir = t.path() + "/out";
  EXPECT_FALSE(build_corpus(o).up_to_date);
  const auto first = files_of(o.out_dir);
  EXPECT_TRUE(build_corpus(o).up_to_date);
  // Damage a file: the next build is not up to date and restores every byte.
  std::string damaged = first.at("math/train.jsonl");
  damaged[10] ^= 1;
  testing::TempDir unused;
  std::ofstream(o.out_dir + "/math/train.jsonl", std::ios::binary) << damaged;
  EXPECT_FALSE(build_corpus(o).up_to_date);
  EXPECT_TRUE(files_of(o.out_dir) == first);
  // Token counts recorded by `corpus tokenize` survive a rebuild that reproduces the files.
  json m = manifest_of(o.out_dir);
  m["tokens"] = {{"0badf00d", {{"totals", {{"train", 1}}}}}};
  std::ofstream(o.out_dir + "/manifest.json") << m.dump(2);
  o.force = true;
  EXPECT_FALSE(build_corpus(o).up_to_date);
  EXPECT_EQ(manifest_of(o.out_dir)["tokens"]["0badf00d"]["totals"]["train"], 1);
}

TEST(Corpus, MissingPackagesAreNamed) {
  CorpusOptions o;
  o.install = false;
  o.deps_script = "/nonexistent/corpus-deps.sh";
  try {
    ensure_packages({{"dspark-no-such-package", "prose domain: /usr/share/nothing.dz"}}, o);
    FAIL() << "a missing package was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("dspark-no-such-package"), std::string::npos) << msg;
    EXPECT_NE(msg.find("/usr/share/nothing.dz"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--no-install"), std::string::npos) << msg;
  }
  // Optional packages are skipped, not errors; installed ones pass.
  const auto skipped = ensure_packages({{"dspark-no-such-package", "x", true}, {"dpkg", "y"}}, o);
  EXPECT_EQ(skipped, std::vector<std::string>{"dspark-no-such-package"});
}

TEST(Corpus, ChatMLFormat) {
  EXPECT_EQ(chatml("Define X", "A letter."),
            "<|im_start|>user\nDefine X<|im_end|>\n<|im_start|>assistant\nA letter.<|im_end|>\n");
  for (uint64_t h = 0; h < 1000; ++h) {
    const int s = split_of(mix64(h));
    EXPECT_TRUE(s >= 0 && s <= 2);
    EXPECT_EQ(s, split_of(mix64(h)));
  }
}

}  // namespace
}  // namespace dspark::data

// The training corpus: openly licensed text that Debian packages ship, plus generated math,
// turned into deduplicated, deterministic train / validation / test splits per domain.
//
//   DIR/<domain>/{train,validation,test}.jsonl   one {"text": ...} per line
//   DIR/prompts/<domain>.jsonl                   held-out evaluation prompts from the test split
//   DIR/manifest.json                            sources, versions, licences, counts, CRC32s;
//                                                written last (it marks the build complete)
//
// Domains: code (Python standard library), math (generated word problems), prose (GCIDE, KJV,
// GNU info manuals), translation (FreeDict), instructions (ChatML turns built from the others).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dspark::data {

const std::vector<std::string>& corpus_domains();      // code, math, prose, translation, instructions
const std::vector<std::string>& corpus_splits();       // train, validation, test
constexpr int kCorpusBuilderVersion = 1;

// The split of a document, from its normalized hash: `holdout_percent` each to validation and
// test, the rest to train. It does not depend on the seed, so a document is held out in every
// build that contains it.
int split_of(uint64_t normalized_doc_hash, int holdout_percent = 1);  // 0 train, 1 validation, 2 test
// The holdout percentage of a domain: 1 (98/1/1), except code, whose few hundred files get 5
// (90/5/5) so its test split holds enough functions for evaluation prompts.
int domain_holdout_percent(const std::string& domain);

// One ChatML exchange: "<|im_start|>user\n...<|im_end|>\n<|im_start|>assistant\n...<|im_end|>\n".
std::string chatml(const std::string& user, const std::string& assistant);

struct CorpusOptions {
  std::string out_dir;
  uint64_t seed = 1;
  double max_mb = 14;                // cap per domain, MB (1e6 bytes) of text over all splits
  std::vector<std::string> domains;  // empty: all
  int prompts_per_domain = 100;
  bool force = false;                // rebuild even when DIR already holds this exact build

  // Packages. `use_packages`: check (and, with `install`, install through
  // scripts/corpus-deps.sh) the Debian packages of the sources, and take the code domain's files
  // from the packages' file lists. false: read whatever the paths below hold (tests).
  bool use_packages = true;
  bool install = true;
  std::string deps_script;           // empty: $DSPARK_CORPUS_DEPS or <source>/scripts/corpus-deps.sh

  // Where the sources live (tests point these at small synthetic files).
  std::string python_dir = "/usr/lib/python3.11";
  std::string dictd_dir = "/usr/share/dictd";
  std::string info_dir = "/usr/share/info";
  std::string bible_path = "/usr/lib/bible.data";

  std::function<void(const std::string&)> log;  // progress lines; may be empty
};

struct CorpusSplitStats {
  int64_t documents = 0;
  int64_t bytes = 0;  // UTF-8 text bytes (not JSON)
};
struct CorpusDomainStats {
  std::string name;
  CorpusSplitStats splits[3];
  int64_t prompts = 0;
};
struct CorpusResult {
  bool up_to_date = false;  // DIR already held this build; nothing was written
  std::vector<CorpusDomainStats> domains;
  double seconds = 0;
};

// Builds the corpus. Errors (Error) name the package, file or field at fault.
CorpusResult build_corpus(const CorpusOptions& opt);

// A Debian package a source reads, and what for (named in errors).
struct PackageNeed {
  std::string package;
  std::string purpose;    // e.g. "prose domain: /usr/share/dictd/gcide.dict.dz"
  bool optional = false;  // skipped, not an error, when it cannot be installed
};
// Makes sure the packages are installed. Missing ones are installed through the dependency
// script when `opt.install`; otherwise (or if installing fails) an Error names every missing
// required package and its purpose. Returns the optional packages that are still missing.
std::vector<std::string> ensure_packages(const std::vector<PackageNeed>& needs, const CorpusOptions& opt);

}  // namespace dspark::data

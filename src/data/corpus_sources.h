// The corpus's documents and sources, shared by the corpus builder (corpus.cpp) and the
// source loaders (corpus_sources.cpp). Internal to dspark_data: nothing outside src/data includes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus.h"

namespace dspark::data::corpus_detail {

constexpr int kTest = 2;  // split index; evaluation prompts come only from the test split

struct Eval {
  std::string prompt, reference;
};

struct Doc {
  std::string text;
  uint64_t hash = 0;   // normalized hash (deduplication)
  int split = 0;       // instruction turns inherit their parent's split
  std::vector<Eval> evals;
};

// A document of `domain`: its normalized hash and its split.
Doc make_doc(std::string text, const std::string& domain);


// The instruction kinds, in the order their turns are balanced.
const std::vector<std::string>& instruction_kinds();
enum Kind { kMath, kDefine, kToEnglish, kFromEnglish, kCodeWrite, kCodeComplete };

struct Seed {
  int kind;
  int split;  // the split of the document the turn was made from
  std::string user, assistant;
};

struct Source {
  std::string id;
  std::string domain;
  std::vector<std::string> packages;
  std::string path;     // what is read (for the manifest)
  std::string licence;  // empty: from the first package's copyright file
  std::vector<std::string> licence_prefer;
  bool documentation = false;
  bool optional = false;
  // Filled in.
  std::vector<std::string> versions;
  bool skipped = false;
  std::string skip_reason;
  std::vector<std::string> files;  // info / python files when read from package lists
  std::vector<Doc> docs;
  std::vector<Seed> seeds;
  int64_t available_bytes = 0;
  int64_t available_docs = -1;  // -1: docs.size()
};

// The sources the options ask for (packages, paths, licences), not yet loaded.
std::vector<Source> plan_sources(const CorpusOptions& opt);
// Reads one source's documents and instruction seeds; sets available_bytes.
void load_source(Source& s, const CorpusOptions& opt);
// Generated math problems, up to `cap` bytes of distinct documents.
void generate_math(Source& s, uint64_t seed, int64_t cap);
// v's items separated by sep.
std::string join(const std::vector<std::string>& v, const std::string& sep);

}  // namespace dspark::data::corpus_detail

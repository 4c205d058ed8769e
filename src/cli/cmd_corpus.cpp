// dspark corpus: build the training corpus from Debian-shipped text; tokenize it into shards.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/flags.h"
#include "data/corpus.h"
#include "data/text_util.h"
#include "data/tokenize_corpus.h"

namespace dspark {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = s.find(',', i);
    const std::string item(data::trim(std::string_view(s).substr(i, j == std::string::npos ? std::string::npos : j - i)));
    if (!item.empty()) out.push_back(item);
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

void log_line(const std::string& m) {
  std::fprintf(stderr, "%s\n", m.c_str());
  std::fflush(stderr);
}

int corpus_build(int argc, char** argv) {
  Args args;
  args.flag("out", "output directory")
      .flag("seed", "seed: document selection, order and generated math", true, "1")
      .flag("max-mb", "cap per domain in MB of text, over all splits", true, "14")
      .flag("domains", "comma-separated subset of code,math,prose,translation,instructions (default: all)")
      .flag("prompts", "evaluation prompts per domain, from the test split", true, "100")
      .flag("no-install", "do not install missing Debian packages; fail naming them", false)
      .flag("force", "rebuild even if DIR already holds this exact build", false);
  if (!args.parse(argc, argv, "corpus build",
                  "Builds a deterministic, deduplicated multi-domain corpus of openly licensed text\n"
                  "shipped by Debian packages (Python standard library, GCIDE, the KJV Bible, GNU\n"
                  "info manuals, FreeDict dictionaries) plus generated math word problems and\n"
                  "ChatML instruction turns made from them. Missing packages are installed with\n"
                  "scripts/corpus-deps.sh (apt-get; sudo when not root). manifest.json, written\n"
                  "last, records sources, versions, licences, counts and CRC32s."))
    return 0;
  if (!args.opt("out")) fail("corpus build: --out DIR is required");
  data::CorpusOptions opt;
  opt.out_dir = args.str("out");
  opt.seed = uint64_t(args.integer("seed", 0, kFlagInt64Max));
  opt.max_mb = args.number("max-mb", 1e-6, 1e7);
  if (auto d = args.opt("domains")) opt.domains = split_list(*d);
  opt.prompts_per_domain = int(args.integer("prompts", 0, 1000000));
  opt.install = !args.on("no-install");
  opt.force = args.on("force");
  opt.log = log_line;
  const auto r = data::build_corpus(opt);
  if (r.up_to_date) {
    std::printf("corpus: %s is up to date\n", opt.out_dir.c_str());
    return 0;
  }
  std::printf("%-13s %10s %10s %8s %8s %9s %8s\n", "domain", "documents", "MB", "train", "valid", "test", "prompts");
  int64_t all_docs = 0, all_bytes = 0;
  for (const auto& d : r.domains) {
    int64_t docs = 0, bytes = 0;
    for (const auto& s : d.splits) {
      docs += s.documents;
      bytes += s.bytes;
    }
    all_docs += docs;
    all_bytes += bytes;
    std::printf("%-13s %10lld %10.2f %8lld %8lld %9lld %8lld\n", d.name.c_str(), (long long)docs, double(bytes) / 1e6,
                (long long)d.splits[0].documents, (long long)d.splits[1].documents, (long long)d.splits[2].documents,
                (long long)d.prompts);
  }
  std::printf("%-13s %10lld %10.2f\ncorpus: wrote %s in %.1f s\n", "total", (long long)all_docs, double(all_bytes) / 1e6,
              opt.out_dir.c_str(), r.seconds);
  return 0;
}

int corpus_tokenize(int argc, char** argv) {
  Args args;
  args.flag("corpus", "corpus directory (from dspark corpus build)")
      .flag("tokenizer", "tokenizer.json (must have <|endoftext|>)")
      .flag("out", "output directory for the token shards")
      .flag("threads", "encoding threads (0: every core)", true, "0")
      .flag("no-corpus-update", "do not record the token counts in the corpus manifest", false);
  if (!args.parse(argc, argv, "corpus tokenize",
                  "Encodes every split of every domain; documents are separated by <|endoftext|>.\n"
                  "Writes DIR2/<domain>/<split>.bin (little-endian uint16 when the vocabulary has\n"
                  "at most 65536 ids, else uint32) and DIR2/manifest.json."))
    return 0;
  for (const char* f : {"corpus", "tokenizer", "out"})
    if (!args.opt(f)) fail("corpus tokenize: --", f, " is required");
  data::TokenizeOptions opt;
  opt.corpus_dir = args.str("corpus");
  opt.tokenizer_file = args.str("tokenizer");
  opt.out_dir = args.str("out");
  opt.threads = int(args.integer("threads", 0, 1024));
  opt.update_corpus_manifest = !args.on("no-corpus-update");
  opt.log = log_line;
  const auto r = data::tokenize_corpus(opt);
  std::printf("corpus tokenize: %lld tokens (vocab %d, tokenizer crc32 %08x) in %.1f s -> %s\n",
              (long long)r.total_tokens, r.vocab_size, r.tokenizer_crc, r.seconds, opt.out_dir.c_str());
  return 0;
}

}  // namespace

int cmd_corpus(int argc, char** argv) {
  static const Subcommand kWhat[] = {
      {"build",
       "build DIR/<domain>/{train,validation,test}.jsonl, DIR/prompts/ and DIR/manifest.json\n"
       "from Debian packages (installed when missing) and generated math",
       corpus_build},
      {"tokenize", "encode a built corpus into DIR2/<domain>/<split>.bin token shards", corpus_tokenize},
  };
  return run_subcommand("dspark corpus", kWhat, argc, argv);
}

}  // namespace dspark

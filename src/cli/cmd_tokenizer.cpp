// dspark tokenizer: train a byte-level BPE tokenizer.json (train) and measure how well a
// tokenizer compresses a corpus (stats).
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/flags.h"
#include "core/mmap_file.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

namespace {

// Lets a flag take several values in a row: `--input a b c` becomes `--input a --input b --input
// c`.
std::vector<std::string> expand_multi(int argc, char** argv, const std::string& flag) {
  std::vector<std::string> out;
  bool in_list = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      in_list = a == flag;
      out.push_back(a);
      if (in_list && i + 1 < argc) out.push_back(argv[++i]);
      continue;
    }
    if (in_list) out.push_back(flag);
    out.push_back(a);
  }
  return out;
}

bool parse_expanded(Args& args, int argc, char** argv, const std::string& command,
                    const std::string& summary) {
  std::vector<std::string> words = expand_multi(argc, argv, "--input");
  std::vector<char*> ptrs;
  for (std::string& w : words) ptrs.push_back(w.data());
  return args.parse(static_cast<int>(ptrs.size()), ptrs.data(), command, summary);
}

void apply_threads(const Args& args) {
  set_num_threads(static_cast<int>(args.integer("threads", 0, 1024)));
}

int64_t max_bytes_flag(const Args& args) {
  if (!args.has("max-mb")) return 0;
  const double mb = args.number("max-mb", 1e-6, 1e7);
  return static_cast<int64_t>(mb * 1e6);
}

// --corpus DIR (DIR/<domain>/<split>.jsonl) or --input FILE... (.jsonl files read their "text"
// field, others are plain text).
std::vector<BpeTrainInput> inputs_from_flags(const Args& args, const std::string& split) {
  if (args.has("corpus") == !args.list("input").empty())
    fail("give exactly one of --corpus DIR or --input FILE...");
  std::vector<BpeTrainInput> inputs;
  if (args.has("corpus")) {
    for (const std::string& f : corpus_split_files(args.str("corpus"), split))
      inputs.push_back(BpeTrainInput::jsonl_file(f));
  } else {
    for (const std::string& f : args.list("input")) {
      const bool jsonl = f.size() >= 6 && f.compare(f.size() - 6, 6, ".jsonl") == 0;
      inputs.push_back(jsonl ? BpeTrainInput::jsonl_file(f) : BpeTrainInput::text_file(f));
    }
  }
  return inputs;
}

int tokenizer_train(int argc, char** argv) {
  Args args;
  args.flag("corpus", "corpus directory: reads every DIR/<domain>/train.jsonl (\"text\" field)")
      .flag("input",
            "text files (or .jsonl files with a \"text\" field); several may follow one --input")
      .flag("vocab-size", "total vocabulary, added tokens included", true, "8192")
      .flag("out", "where to write tokenizer.json (tokenizer_config.json goes next to it)")
      .flag("min-frequency", "never merge a pair seen fewer times", true, "2")
      .flag("reserved", "number of <|reserved_N|> tokens after the four specials", true, "12")
      .flag("model-max-length", "model_max_length in tokenizer_config.json", true, "32768")
      .flag("threads", "counting threads (0: DSPARK_THREADS or all cores)", true, "0")
      .flag("max-mb", "read at most this many MB of input, shared evenly between the inputs")
      .flag("quiet", "print nothing on success (no progress lines, no summary)", false);
  if (!parse_expanded(args, argc, argv, "tokenizer train",
                      "Trains a byte-level BPE tokenizer (Qwen2-style pre-tokenizer, 256 byte "
                      "tokens, special\n"
                      "tokens <|endoftext|> <|im_start|> <|im_end|> <|mask|> and reserved ones "
                      "after the learned\n"
                      "vocabulary) and writes tokenizer.json and tokenizer_config.json."))
    return 0;
  apply_threads(args);
  BpeTrainOptions opt;
  opt.vocab_size = static_cast<int>(args.integer("vocab-size", 1, int64_t{1} << 24));
  opt.min_frequency = args.integer("min-frequency", 1, kFlagInt64Max);
  opt.reserved_tokens = static_cast<int>(args.integer("reserved", 0, int64_t{1} << 20));
  opt.model_max_length = args.integer("model-max-length", 1, kFlagInt64Max);
  opt.max_bytes = max_bytes_flag(args);
  opt.progress = !args.on("quiet");
  const std::string out = args.str("out");
  const std::vector<BpeTrainInput> inputs = inputs_from_flags(args, "train");

  const double t0 = now_seconds();
  const BpeModel model = train_bpe_tokenizer(inputs, opt, out);
  const double total = now_seconds() - t0;
  const BpeTrainStats& st = model.stats;
  if (!args.on("quiet"))
    std::fprintf(stderr,
                 "wrote %s: %d tokens (%zu learned, %zu added), %zu merges; %.1f MB in %lld "
                 "documents, %lld distinct "
                 "pieces; counting %.1f s, merging %.1f s, total %.1f s\n",
                 out.c_str(), model.vocab_size(), model.tokens.size(), model.added_tokens.size(),
                 model.merges.size(), static_cast<double>(st.input_bytes) / 1e6,
                 static_cast<long long>(st.documents), static_cast<long long>(st.unique_words),
                 st.count_seconds, st.merge_seconds, total);
  return 0;
}

struct SourceStats {
  std::string name;
  int64_t documents = 0, bytes = 0, tokens = 0;
};

// Encodes one source with `tok`: JSONL documents in parallel, a text file as one text.
SourceStats measure(const Tokenizer& tok, const BpeTrainInput& in, int64_t max_bytes) {
  SourceStats s;
  MappedFile file(in.value);
  std::string_view data(reinterpret_cast<const char*>(file.data()), file.size());
  if (max_bytes > 0 && data.size() > static_cast<size_t>(max_bytes)) {
    const size_t nl = data.rfind('\n', static_cast<size_t>(max_bytes));
    data = data.substr(0, nl == std::string_view::npos ? static_cast<size_t>(max_bytes) : nl + 1);
  }
  if (in.kind != BpeTrainInput::Kind::JsonlFile) {
    s.documents = 1;
    s.bytes = static_cast<int64_t>(data.size());
    s.tokens = static_cast<int64_t>(tok.encode(data).size());
    return s;
  }
  std::vector<std::string_view> lines;
  for (size_t b = 0; b < data.size();) {
    size_t e = data.find('\n', b);
    if (e == std::string_view::npos) e = data.size();
    if (data.substr(b, e - b).find_first_not_of(" \t\r") != std::string_view::npos)
      lines.push_back(data.substr(b, e - b));
    b = e + 1;
  }
  const int tasks = std::max(1, num_threads());
  std::vector<SourceStats> part(static_cast<size_t>(tasks));
  std::vector<std::string> errors(static_cast<size_t>(tasks));
  std::atomic<size_t> next{0};
  parallel_for(tasks, [&](int t) {
    SourceStats& p = part[static_cast<size_t>(t)];
    for (size_t i; (i = next.fetch_add(1)) < lines.size();) {
      try {
        const nlohmann::json j = nlohmann::json::parse(lines[i]);
        const std::string& text = j.at(in.field).get_ref<const std::string&>();
        p.bytes += static_cast<int64_t>(text.size());
        p.tokens += static_cast<int64_t>(tok.encode(text).size());
        ++p.documents;
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] =
            in.value + ": line " + std::to_string(i + 1) + ": " + e.what();
        next = lines.size();
      }
    }
  });
  for (const std::string& e : errors)
    if (!e.empty()) fail(e);
  for (const SourceStats& p : part) {
    s.documents += p.documents;
    s.bytes += p.bytes;
    s.tokens += p.tokens;
  }
  return s;
}

int tokenizer_stats(int argc, char** argv) {
  Args args;
  args.flag("tokenizer", "tokenizer.json to measure")
      .flag("corpus", "corpus directory: reads every DIR/<domain>/<split>.jsonl")
      .flag("split", "with --corpus: which split", true, "validation")
      .flag("input",
            "text files (or .jsonl files with a \"text\" field); several may follow one --input")
      .flag("max-mb", "read at most this many MB of each input")
      .flag("threads", "encoding threads (0: DSPARK_THREADS or all cores)", true, "0")
      .flag("json", "print one JSON object instead of a table", false);
  if (!parse_expanded(args, argc, argv, "tokenizer stats",
                      "Encodes a corpus split (or files) and prints bytes, tokens and bytes "
                      "per token for each\n"
                      "domain (or file) and in all."))
    return 0;
  apply_threads(args);
  const std::unique_ptr<Tokenizer> tok = Tokenizer::from_file(args.str("tokenizer"));
  const std::vector<BpeTrainInput> inputs = inputs_from_flags(args, args.str("split"));
  const int64_t max_bytes = max_bytes_flag(args);
  const double t0 = now_seconds();
  std::vector<SourceStats> rows;
  SourceStats all{"all"};
  for (const BpeTrainInput& in : inputs) {
    SourceStats s = measure(*tok, in, max_bytes);
    const std::filesystem::path p(in.value);
    s.name = args.has("corpus") ? p.parent_path().filename().string() : p.string();
    all.documents += s.documents;
    all.bytes += s.bytes;
    all.tokens += s.tokens;
    rows.push_back(s);
  }
  rows.push_back(all);
  const double secs = now_seconds() - t0;
  auto ratio = [](const SourceStats& s) {
    return s.tokens ? static_cast<double>(s.bytes) / static_cast<double>(s.tokens) : 0.0;
  };
  if (args.on("json")) {
    nlohmann::ordered_json out;
    out["tokenizer"] = args.str("tokenizer");
    out["vocab_size"] = tok->vocab_size();
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const SourceStats& s : rows)
      list.push_back({{"name", s.name},
                      {"documents", s.documents},
                      {"bytes", s.bytes},
                      {"tokens", s.tokens},
                      {"bytes_per_token", ratio(s)}});
    out["sources"] = list;
    out["seconds"] = secs;
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("%-24s %10s %14s %12s %8s\n", "source", "documents", "bytes", "tokens",
                "bytes/tok");
    for (const SourceStats& s : rows)
      std::printf("%-24s %10lld %14lld %12lld %8.3f\n", s.name.c_str(),
                  static_cast<long long>(s.documents), static_cast<long long>(s.bytes),
                  static_cast<long long>(s.tokens), ratio(s));
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int cmd_tokenizer(int argc, char** argv) {
  static const Subcommand kWhat[] = {
      {"train", "learn a byte-level BPE tokenizer.json from a corpus or text files", tokenizer_train},
      {"stats", "bytes per token of a tokenizer.json on a corpus split or files", tokenizer_stats},
  };
  return run_subcommand("dspark tokenizer", kWhat, argc, argv);
}

}  // namespace dspark

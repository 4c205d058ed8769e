// The corpus's sources: which Debian packages and files each domain reads (plan_sources), and
// how each is turned into documents and instruction seeds (load_source, generate_math).
#include "data/corpus_sources.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_set>

#include "core/error.h"
#include "core/mmap_file.h"
#include "core/rng.h"
#include "data/bible.h"
#include "data/compress.h"
#include "data/dictd.h"
#include "data/freedict.h"
#include "data/gcide.h"
#include "data/info_manual.h"
#include "data/math_gen.h"
#include "data/python_code.h"
#include "data/system.h"
#include "data/text_util.h"

namespace dspark::data::corpus_detail {

namespace fs = std::filesystem;

Doc make_doc(std::string text, const std::string& domain) {
  Doc d;
  d.text = std::move(text);
  d.hash = normalized_hash(d.text);
  d.split = split_of(d.hash, domain_holdout_percent(domain));
  return d;
}

// The instruction kinds, in the order their turns are balanced.
const std::vector<std::string>& instruction_kinds() {
  static const std::vector<std::string> k = {"math", "define", "translate_to_english", "translate_from_english",
                                             "code_write", "code_complete"};
  return k;
}

namespace {

const std::vector<std::string> kRequiredInfoPackages = {"coreutils", "diffutils", "findutils", "grep", "sed"};
const std::vector<std::string> kOptionalInfoPackages = {"gzip", "bc", "ed", "time", "wget", "gettext",
                                                        "gnupg", "readline-common", "bzip2-doc"};
const std::vector<std::string> kFreedictPairs = {"deu-eng", "fra-eng", "spa-eng", "ita-eng", "nld-eng", "por-eng",
                                                 "eng-deu", "eng-fra", "eng-spa", "eng-ita", "eng-nld", "eng-por"};


}  // namespace

std::vector<Source> plan_sources(const CorpusOptions& opt) {
  std::vector<Source> s;
  {
    Source c;
    c.id = "python-stdlib";
    c.domain = "code";
    if (opt.use_packages) c.packages = {"libpython3.11-stdlib", "libpython3.11-minimal"};
    c.path = opt.python_dir + "/**/*.py";
    c.licence = "PSF-2.0";
    s.push_back(c);
  }
  {
    Source g;
    g.id = "gcide";
    g.domain = "prose";
    if (opt.use_packages) g.packages = {"dict-gcide"};
    g.path = opt.dictd_dir + "/gcide.dict.dz";
    s.push_back(g);
  }
  {
    Source b;
    b.id = "kjv";
    b.domain = "prose";
    if (opt.use_packages) b.packages = {"bible-kjv-text"};
    b.path = opt.bible_path;
    b.licence = "public domain (King James Version, 1611)";
    s.push_back(b);
  }
  if (opt.use_packages) {
    for (const auto* list : {&kRequiredInfoPackages, &kOptionalInfoPackages})
      for (const auto& p : *list) {
        Source i;
        i.id = "info:" + p;
        i.domain = "prose";
        i.packages = {p};
        i.path = opt.info_dir + "/*.info*.gz";
        i.documentation = true;
        i.licence_prefer = {"doc/", ".texi", ".info"};
        i.optional = list == &kOptionalInfoPackages;
        s.push_back(i);
      }
  } else {
    // One source per manual found in the directory.
    std::set<std::string> manuals;
    std::error_code ec;
    if (fs::is_directory(opt.info_dir, ec))
      for (const auto& e : fs::directory_iterator(opt.info_dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.find(".info") != std::string::npos && ends_with(name, ".gz")) manuals.insert(info_manual_name(name));
      }
    for (const auto& m : manuals) {
      Source i;
      i.id = "info:" + m;
      i.domain = "prose";
      i.path = opt.info_dir + "/" + m + ".info*.gz";
      i.documentation = true;
      s.push_back(i);
    }
  }
  for (const auto& pair : kFreedictPairs) {
    Source f;
    f.id = "freedict:" + pair;
    f.domain = "translation";
    if (opt.use_packages) f.packages = {"dict-freedict-" + pair};
    f.path = opt.dictd_dir + "/freedict-" + pair + ".dict.dz";
    f.licence_prefer = {pair + "/"};
    f.optional = pair.find("por") != std::string::npos;
    s.push_back(f);
  }
  return s;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Phrasing

std::string dq(const std::string& s) { return "\"" + s + "\""; }

// "Return the sum of x." -> "returns the sum of x" when the first word is a common imperative.
std::string third_person_summary(const std::string& summary, bool* ok) {
  static const std::set<std::string> kVerbs = {
      "Return", "Compute", "Calculate", "Convert", "Create", "Build", "Make", "Get", "Find", "Check", "Test",
      "Parse", "Read", "Write", "Remove", "Add", "Split", "Join", "Format", "Encode", "Decode", "Generate",
      "Determine", "Extract", "Open", "Close", "Copy", "Load", "Save", "Print", "Set", "Update", "Strip",
      "Replace", "Translate", "Normalize", "Escape", "Unescape", "Quote", "Unquote", "Validate", "Compare",
      "Count", "Construct", "Register", "Search", "Match", "Wrap", "Walk", "Apply", "Raise", "Yield", "Take",
      "Send", "Install", "Delete", "Insert", "Resolve", "Run", "Call", "Fetch", "Collect", "Produce", "Emit",
      "Select", "Sort", "Filter", "Merge", "Expand", "Reset", "Initialize", "Guess", "Try", "Handle", "Lookup",
      "Look", "Transform", "Indent", "Dedent", "Fill", "Shorten", "Truncate", "Pack", "Unpack", "Serialize",
      "Deserialize", "Tokenize", "Evaluate", "Execute", "Install", "Retrieve", "Display", "Show", "List"};
  *ok = false;
  const size_t sp = summary.find(' ');
  if (sp == std::string::npos) return summary;
  const std::string first = summary.substr(0, sp);
  if (!kVerbs.count(first)) return summary;
  std::string verb = lower_ascii(first);
  const char last = verb.back();
  if (verb == "try") verb = "tries";
  else if (last == 's' || last == 'x' || last == 'h' || last == 'z') verb += "es";
  else if (last == 'y' && verb.size() > 1 && std::string("aeiou").find(verb[verb.size() - 2]) == std::string::npos)
    verb = verb.substr(0, verb.size() - 1) + "ies";
  else verb += "s";
  std::string rest = summary.substr(sp);
  while (!rest.empty() && (rest.back() == '.' || rest.back() == ' ')) rest.pop_back();
  *ok = true;
  return verb + rest;
}

std::string code_block(const std::string& code) {
  std::string c = code;
  if (!c.empty() && c.back() != '\n') c += '\n';
  return "```python\n" + c + "```";
}

void code_seeds(const PyFunction& f, uint64_t parent, int split, std::vector<Seed>* out) {
  Rng rng = Rng::from_word(mix64(parent ^ hash64(f.name)));
  const std::string sig = f.name + "(" + f.params + ")";
  {
    bool ok = false;
    const std::string third = third_person_summary(f.summary, &ok);
    std::string user;
    const int style = int(rng.below(ok ? 4 : 3));
    std::string summary = f.summary;
    switch (style) {
      case 0:
        user = "Implement the Python function `" + sig + "`. Its docstring starts: \"" + summary + "\"";
        break;
      case 1:
        user = "Write a Python function named `" + f.name + "` taking (" + f.params + "). Purpose: " + summary;
        break;
      case 2:
        user = "In Python, write `" + sig + "`.\n\nDescription: " + summary;
        break;
      default:
        user = "Write a Python function `" + sig + "` that " + third + ".";
    }
    out->push_back({kCodeWrite, split, user, code_block(f.source)});
  }
  {
    static const std::vector<std::string> kAsk = {
        "Complete this Python function:", "Finish the implementation of this function:",
        "Fill in the body of this Python function.", "Here is a function signature and docstring. Write the body.",
        "Complete the code:"};
    const std::string user = rng.pick(kAsk) + "\n\n" + code_block(f.header);
    out->push_back({kCodeComplete, split, user, code_block(f.source)});
  }
}

// ---------------------------------------------------------------------------------------------
// Loaders

std::vector<std::string> python_files(const Source& s, const CorpusOptions& opt) {
  std::vector<std::string> files;
  const std::string prefix = opt.python_dir + "/";
  const auto wanted = [&](const std::string& p) {
    return starts_with(p, prefix) && ends_with(p, ".py") && p.find("/dist-packages/") == std::string::npos &&
           p.find("/site-packages/") == std::string::npos && p.find("/__pycache__/") == std::string::npos;
  };
  if (!s.packages.empty()) {
    for (const auto& pkg : s.packages)
      for (const auto& f : package_files(pkg))
        if (wanted(f)) files.push_back(f);
  } else {
    std::error_code ec;
    if (fs::is_directory(opt.python_dir, ec))
      for (auto it = fs::recursive_directory_iterator(opt.python_dir, ec); it != fs::recursive_directory_iterator();
           it.increment(ec)) {
        if (ec) break;
        if (it->is_regular_file(ec) && wanted(it->path().string())) files.push_back(it->path().string());
      }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

void load_python(Source& s, const CorpusOptions& opt) {
  for (const auto& path : python_files(s, opt)) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) continue;
    const std::string raw = read_text_file(path);
    const std::string rel = path.substr(opt.python_dir.size());
    if (skip_python_file(rel, raw)) continue;
    Doc d = make_doc(sanitize_utf8(raw), "code");
    for (const auto& f : extract_python_functions(d.text)) {
      if (d.split == kTest) d.evals.push_back({f.header, f.body});
      code_seeds(f, d.hash, d.split, &s.seeds);
    }
    s.files.push_back(path);
    s.docs.push_back(std::move(d));
  }
}

void load_gcide(Source& s, const CorpusOptions& opt) {
  const std::string index = opt.dictd_dir + "/gcide.index", dict = opt.dictd_dir + "/gcide.dict.dz";
  std::error_code ec;
  if (!opt.use_packages && (!fs::exists(index, ec) || !fs::exists(dict, ec))) {
    s.skipped = true;
    s.skip_reason = "not present";
    return;
  }
  static const std::vector<std::string> kAsk = {"Define \"{}\".", "What does \"{}\" mean?",
                                                "Give the dictionary definition of \"{}\".",
                                                "What is the meaning of the word \"{}\"?", "Define {}."};
  for (const auto& e : read_dictd(index, dict)) {
    GcideEntry g;
    if (!clean_gcide_entry(e.headword, e.body, &g)) continue;
    Doc d = make_doc(g.text, "prose");
    if (d.split == kTest) d.evals.push_back({"Define " + g.headword, g.definition});
    Rng rng = Rng::from_word(mix64(d.hash ^ 0x646566ULL));
    s.seeds.push_back({kDefine, d.split, replace_all(rng.pick(kAsk), "{}", g.headword), g.headword + ", " + g.definition});
    s.docs.push_back(std::move(d));
  }
}

void load_bible(Source& s, const CorpusOptions& opt) {
  std::error_code ec;
  if (!opt.use_packages && !fs::exists(opt.bible_path, ec)) {
    s.skipped = true;
    s.skip_reason = "not present";
    return;
  }
  for (auto& c : bible_chapters(read_brs_data_file(opt.bible_path))) s.docs.push_back(make_doc(std::move(c.text), "prose"));
}

void load_info(Source& s, const CorpusOptions& opt) {
  // Files of each manual, main file first, then its parts in order.
  std::map<std::string, std::vector<std::pair<int, std::string>>> manuals;
  const auto add = [&](const std::string& path) {
    const std::string name = path.substr(path.rfind('/') + 1);
    if (name.find(".info") == std::string::npos || !ends_with(name, ".gz")) return;
    int part = 0;
    const std::string manual = info_manual_name(path, &part);
    manuals[manual].emplace_back(part, path);
  };
  if (!s.packages.empty()) {
    for (const auto& f : package_files(s.packages[0]))
      if (starts_with(f, opt.info_dir + "/")) add(f);
  } else {
    const std::string manual = s.id.substr(5);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(opt.info_dir, ec)) {
      const std::string p = e.path().string();
      if (info_manual_name(p) == manual) add(p);
    }
  }
  for (auto& [manual, parts] : manuals) {
    std::sort(parts.begin(), parts.end());
    std::string text;
    for (const auto& [part, path] : parts) {
      text += read_gzip_file(path);
      s.files.push_back(path);
    }
    std::string title;
    const auto nodes = parse_info_manual(text, &title);
    if (title.empty()) title = manual + " manual";
    for (const auto& n : nodes) s.docs.push_back(make_doc(title + ": " + n.node + "\n\n" + n.text, "prose"));
  }
}

// A "translate this" request; styles 0..3.
std::string translate_request(int style, const std::string& word, const std::string& from, const std::string& to) {
  switch (style) {
    case 0: return "Translate " + dq(word) + " from " + from + " to " + to + ".";
    case 1: return "What is " + dq(word) + " in " + to + "?";
    case 2: return "How do you say the " + from + " " + (word.find(' ') == std::string::npos ? "word " : "phrase ") +
                   dq(word) + " in " + to + "?";
    default: return from + ": " + word + "\nTranslate into " + to + ".";
  }
}

void load_freedict(Source& s, const CorpusOptions& opt) {
  const std::string pair = s.id.substr(9);
  const std::string from = language_name(pair.substr(0, 3)), to = language_name(pair.substr(4, 3));
  const std::string index = opt.dictd_dir + "/freedict-" + pair + ".index";
  const std::string dict = opt.dictd_dir + "/freedict-" + pair + ".dict.dz";
  std::error_code ec;
  if (!opt.use_packages && (!fs::exists(index, ec) || !fs::exists(dict, ec))) {
    s.skipped = true;
    s.skip_reason = "not present";
    return;
  }
  if (from.empty() || to.empty()) fail(s.id, ": unknown language code in '", pair, "'");
  const bool to_english = to == "English";
  for (const auto& e : read_dictd(index, dict)) {
    FreedictEntry f;
    if (!parse_freedict_entry(e.body, &f)) continue;
    const std::string answer = join(f.translations, "; ");
    // The document's wording is chosen from the entry itself (not the seed), so a document's
    // identity, and with it its split, is the same in every build.
    const uint64_t h = hash64(pair + "\n" + f.headword + "\n" + answer);
    Rng rng = Rng::from_word(h);
    std::string text;
    if (rng.below(3) == 0) {
      text = from + ": " + f.headword + (f.pos.empty() ? "" : " (" + f.pos + ")") + "\n" + to + ": " + answer;
    } else {
      text = translate_request(int(rng.below(4)), f.headword, from, to) + "\n" + answer;
    }
    for (const auto& n : f.notes) text += "\nNote: " + n;
    for (size_t k = 0; k < f.examples.size() && k < 4; ++k)
      text += "\nExample: " + dq(f.examples[k].first) + " = " + dq(f.examples[k].second);
    Doc d = make_doc(text, "translation");
    if (d.split == kTest) d.evals.push_back({translate_request(0, f.headword, from, to), answer});
    std::string reply;
    switch (rng.below(3)) {
      case 0: reply = answer; break;
      case 1: reply = "In " + to + ": " + answer; break;
      default: reply = dq(f.headword) + " translates as: " + answer;
    }
    if (!f.examples.empty())
      reply += "\n\nFor example, " + dq(f.examples[0].first) + " is " + dq(f.examples[0].second) + ".";
    s.seeds.push_back({to_english ? kToEnglish : kFromEnglish, d.split,
                       translate_request(int(rng.below(4)), f.headword, from, to), reply});
    s.docs.push_back(std::move(d));
  }
}

}  // namespace

void load_source(Source& s, const CorpusOptions& opt) {
  if (s.id == "python-stdlib") load_python(s, opt);
  else if (s.id == "gcide") load_gcide(s, opt);
  else if (s.id == "kjv") load_bible(s, opt);
  else if (starts_with(s.id, "info:")) load_info(s, opt);
  else if (starts_with(s.id, "freedict:")) load_freedict(s, opt);
  for (const auto& d : s.docs) s.available_bytes += int64_t(d.text.size());
}

// Generated math problems, up to `cap` bytes of distinct documents.
void generate_math(Source& s, uint64_t seed, int64_t cap) {
  std::unordered_set<uint64_t> seen;
  int64_t bytes = 0;
  static const std::vector<std::string> kLead = {"", "", "Solve this problem step by step.\n\n",
                                                 "Please solve the following word problem.\n\n",
                                                 "Work out the answer, showing each step.\n\n"};
  for (uint64_t i = 0; bytes < cap && i < uint64_t(cap / 50 + 1000); ++i) {
    const MathProblem p = generate_math_problem(mix64(seed) ^ (i * 0x9e3779b97f4a7c15ULL));
    Doc d = make_doc(p.text(), "math");
    if (!seen.insert(d.hash).second) continue;
    if (d.split == kTest) d.evals.push_back({p.question, p.answer_text});
    Rng rng = Rng::from_word(d.hash);
    s.seeds.push_back({kMath, d.split, rng.pick(kLead) + p.question, p.solution});
    bytes += int64_t(d.text.size());
    s.docs.push_back(std::move(d));
  }
  s.available_bytes = bytes;
}

}  // namespace dspark::data::corpus_detail

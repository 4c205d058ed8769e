#include "data/corpus.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_set>

#include "core/crc32.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/compress.h"
#include "data/corpus_sources.h"
#include "data/math_gen.h"
#include "data/system.h"
#include "data/text_util.h"

#ifndef DSPARK_SOURCE_DIR
#define DSPARK_SOURCE_DIR "."
#endif

namespace dspark::data {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
using namespace corpus_detail;

const std::vector<std::string>& corpus_domains() {
  static const std::vector<std::string> d = {"code", "math", "prose", "translation", "instructions"};
  return d;
}

const std::vector<std::string>& corpus_splits() {
  static const std::vector<std::string> s = {"train", "validation", "test"};
  return s;
}

int split_of(uint64_t h, int holdout_percent) {
  const uint64_t r = mix64(h ^ 0x73706c6974ULL) % 100;
  const uint64_t p = uint64_t(std::clamp(holdout_percent, 0, 50));
  return r < p ? 1 : r < 2 * p ? 2 : 0;
}

int domain_holdout_percent(const std::string& domain) { return domain == "code" ? 5 : 1; }

std::string chatml(const std::string& user, const std::string& assistant) {
  return "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n" + assistant + "<|im_end|>\n";
}

namespace {

std::string deps_script(const CorpusOptions& opt) {
  if (!opt.deps_script.empty()) return opt.deps_script;
  if (const char* e = std::getenv("DSPARK_CORPUS_DEPS"); e && *e) return e;
  return std::string(DSPARK_SOURCE_DIR) + "/scripts/corpus-deps.sh";
}

}  // namespace

std::vector<std::string> ensure_packages(const std::vector<PackageNeed>& needs, const CorpusOptions& opt) {
  const auto log = [&](const std::string& m) {
    if (opt.log) opt.log(m);
  };
  std::vector<const PackageNeed*> missing;
  std::set<std::string> seen;
  for (const auto& n : needs)
    if (seen.insert(n.package).second && !query_package(n.package).installed) missing.push_back(&n);
  std::vector<std::string> optional_missing;
  if (missing.empty()) return optional_missing;
  const std::string script = deps_script(opt);
  const auto fail_missing = [&](const std::vector<const PackageNeed*>& req, const std::string& why) {
    std::string list, names;
    for (const auto* n : req) {
      list += "\n  " + n->package + " (" + n->purpose + ")";
      names += " " + n->package;
    }
    fail("missing Debian package", req.size() > 1 ? "s" : "", " ", why, ":", list, "\ninstall with: ", script, names);
  };
  std::vector<const PackageNeed*> to_install, required;
  for (const auto* n : missing) {
    if (n->optional && (!opt.install || !package_installable(n->package))) {
      log("corpus: optional package " + n->package + " is not installed; skipping it (" + n->purpose + ")");
      optional_missing.push_back(n->package);
      continue;
    }
    to_install.push_back(n);
    if (!n->optional) required.push_back(n);
  }
  if (to_install.empty()) return optional_missing;
  if (!opt.install) fail_missing(required, "(--no-install given)");
  if (!fs::exists(script)) fail(script, ": the corpus dependency script is missing (set DSPARK_CORPUS_DEPS)");
  std::string list;
  std::vector<std::string> argv = {"bash", script};
  for (const auto* n : to_install) {
    list += " " + n->package;
    argv.push_back(n->package);
  }
  log("corpus: installing" + list + " with " + script);
  const auto r = run_command(argv, /*quiet=*/false);
  std::vector<const PackageNeed*> still;
  for (const auto* n : to_install)
    if (!query_package(n->package).installed) {
      if (n->optional) optional_missing.push_back(n->package);
      else still.push_back(n);
    }
  if (!still.empty())
    fail_missing(still, "(" + script + " exited with status " + std::to_string(r.status) + ")");
  return optional_missing;
}

namespace {

// Checks (and installs) the packages of the sources in use; fills versions; skips optional
// sources whose package is missing.
void resolve_packages(std::vector<Source*>& sources, const CorpusOptions& opt) {
  std::vector<PackageNeed> needs;
  for (Source* s : sources)
    for (const auto& p : s->packages) needs.push_back({p, s->domain + " domain: " + s->path, s->optional});
  ensure_packages(needs, opt);
  for (Source* s : sources) {
    s->versions.clear();
    for (const auto& p : s->packages) {
      const auto info = query_package(p);
      if (!info.installed) {
        if (s->optional) {
          s->skipped = true;
          s->skip_reason = "package " + p + " is not installed and has no install candidate";
          break;
        }
        fail("package ", p, " is still not installed (needed for ", s->path, ")");
      }
      if (info.section.rfind("non-free", 0) == 0 || info.section.rfind("contrib", 0) == 0) {
        s->skipped = true;
        s->skip_reason = "package " + p + " is in " + info.section + ", not Debian main";
        break;
      }
      s->versions.push_back(info.version);
    }
    if (!s->skipped && s->licence.empty() && !s->packages.empty())
      s->licence = package_licence(s->packages[0], s->licence_prefer, s->documentation);
  }
}

// ---------------------------------------------------------------------------------------------
// Selection

struct Picked {
  const Doc* doc;
  int source;
  uint64_t order;
};

uint64_t order_key(uint64_t seed, const std::string& domain, uint64_t h) {
  return mix64(h ^ mix64(seed + 0x5851f42d4c957f2dULL) ^ hash64(domain));
}

// Byte-balanced selection: repeatedly take the next document (in seeded order) of the source
// that has contributed the fewest bytes, skipping duplicates, until `cap` bytes are taken or
// every source is used up. Small sources end up whole; large ones share what is left.
std::vector<Picked> select_docs(const std::vector<const std::vector<Doc>*>& pools, int64_t cap, uint64_t seed,
                                const std::string& domain, std::vector<int64_t>* taken_bytes,
                                std::vector<int64_t>* taken_docs) {
  const size_t n = pools.size();
  std::vector<std::vector<std::pair<uint64_t, uint32_t>>> order(n);
  for (size_t s = 0; s < n; ++s) {
    order[s].reserve(pools[s]->size());
    for (size_t i = 0; i < pools[s]->size(); ++i)
      order[s].emplace_back(order_key(seed, domain, (*pools[s])[i].hash), uint32_t(i));
    std::sort(order[s].begin(), order[s].end());
  }
  taken_bytes->assign(n, 0);
  taken_docs->assign(n, 0);
  std::vector<size_t> cursor(n, 0);
  std::unordered_set<uint64_t> seen;
  std::vector<Picked> out;
  int64_t total = 0;
  for (;;) {
    int best = -1;
    for (size_t s = 0; s < n; ++s)
      if (cursor[s] < order[s].size() && (best < 0 || (*taken_bytes)[s] < (*taken_bytes)[size_t(best)])) best = int(s);
    if (best < 0 || total >= cap) break;
    const auto [key, idx] = order[size_t(best)][cursor[size_t(best)]++];
    const Doc& d = (*pools[size_t(best)])[idx];
    const int64_t size = int64_t(d.text.size());
    if (total + size > cap) continue;  // too big for what is left; smaller ones may still fit
    if (!seen.insert(d.hash).second) continue;
    total += size;
    (*taken_bytes)[size_t(best)] += size;
    (*taken_docs)[size_t(best)] += 1;
    out.push_back({&d, best, key});
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Output

struct DomainOut {
  std::string name;
  std::vector<Source*> sources;       // in manifest order
  std::vector<Source> kinds;          // instructions: one pseudo-source per kind
  std::vector<Picked> picked;
  std::vector<int64_t> taken_bytes, taken_docs;
  CorpusDomainStats stats;
  std::string split_files[3];
  uint32_t split_crc[3] = {0, 0, 0};
  int64_t split_file_bytes[3] = {0, 0, 0};
  std::string prompts_file;
  uint32_t prompts_crc = 0;
};

void write_domain(DomainOut& d, const std::string& dir, int prompts_per_domain) {
  std::vector<const Picked*> by_split[3];
  for (const auto& p : d.picked) by_split[p.doc->split].push_back(&p);
  fs::create_directories(dir + "/" + d.name);
  d.stats.name = d.name;
  for (int s = 0; s < 3; ++s) {
    auto& v = by_split[s];
    std::sort(v.begin(), v.end(), [](const Picked* a, const Picked* b) {
      return a->order != b->order ? a->order < b->order : a->doc->hash < b->doc->hash;
    });
    std::string out;
    for (const Picked* p : v) {
      out += "{\"text\": " + json_quote(p->doc->text) + "}\n";
      d.stats.splits[s].documents += 1;
      d.stats.splits[s].bytes += int64_t(p->doc->text.size());
    }
    const std::string rel = d.name + "/" + corpus_splits()[size_t(s)] + ".jsonl";
    write_file_atomic(dir + "/" + rel, out.data(), out.size());
    d.split_files[s] = rel;
    d.split_crc[s] = crc32_bytes(out.data(), out.size());
    d.split_file_bytes[s] = int64_t(out.size());
  }
  // Evaluation prompts from the test split, in its order; at most 25 per document (code files
  // hold many functions).
  std::string out;
  int64_t count = 0;
  for (const Picked* p : by_split[2]) {
    int from_doc = 0;
    for (const auto& e : p->doc->evals) {
      if (count >= prompts_per_domain || from_doc >= 25) break;
      out += "{\"domain\": " + json_quote(d.name) + ", \"prompt\": " + json_quote(e.prompt) +
             ", \"reference\": " + json_quote(e.reference) + "}\n";
      ++count;
      ++from_doc;
    }
    if (count >= prompts_per_domain) break;
  }
  fs::create_directories(dir + "/prompts");
  d.prompts_file = "prompts/" + d.name + ".jsonl";
  write_file_atomic(dir + "/" + d.prompts_file, out.data(), out.size());
  d.prompts_crc = crc32_bytes(out.data(), out.size());
  d.stats.prompts = count;
}

ojson config_json(const CorpusOptions& opt, const std::vector<std::string>& domains,
                  const std::vector<Source>& sources) {
  ojson c;
  c["builder_version"] = kCorpusBuilderVersion;
  c["seed"] = opt.seed;
  c["max_mb"] = opt.max_mb;
  c["prompts_per_domain"] = opt.prompts_per_domain;
  c["domains"] = domains;
  ojson src = ojson::object();
  for (const auto& s : sources) {
    ojson v = ojson::array();
    for (size_t i = 0; i < s.packages.size() && i < s.versions.size(); ++i)
      v.push_back(s.packages[i] + "=" + s.versions[i]);
    if (s.skipped) v.push_back("skipped");
    src[s.id] = v;
  }
  c["sources"] = src;
  return c;
}

// Key order does not matter (a manifest may have been rewritten by another JSON writer).
bool same_json(const ojson& a, const ojson& b) {
  return nlohmann::json::parse(a.dump()) == nlohmann::json::parse(b.dump());
}

// True when DIR/manifest.json records this configuration and every file it lists is intact.
bool up_to_date(const std::string& dir, const ojson& config) {
  const std::string path = dir + "/manifest.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  ojson m;
  try {
    m = ojson::parse(read_text_file(path));
  } catch (const std::exception&) {
    return false;
  }
  if (!m.is_object() || !m.contains("config") || !same_json(m["config"], config) || !m.contains("files") ||
      !m["files"].is_object())
    return false;
  for (auto it = m["files"].begin(); it != m["files"].end(); ++it) {
    const std::string f = dir + "/" + it.key();
    if (!it.value().is_object() || !it.value().contains("crc32") || !it.value()["crc32"].is_string())
      return false;
    const auto want = crc32_from_hex(it.value()["crc32"].get<std::string>());
    if (!want || !fs::exists(f, ec) || crc32_file(f) != *want) return false;
  }
  return true;
}

void run_parallel(std::vector<std::function<void()>>& jobs) {
  const unsigned workers = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 4));
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(jobs.size());
  const auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      try {
        jobs[i]();
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < workers; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);  // the first failing job, in job order
}

// build_corpus's steps, in the order it runs them.

void note(const CorpusOptions& opt, const std::string& m) {
  if (opt.log) opt.log(m);
}

// The domains to write, in canonical order (all when none are named).
std::vector<std::string> chosen_domains(const CorpusOptions& opt) {
  std::vector<std::string> domains;
  for (const auto& d : opt.domains)
    if (std::find(corpus_domains().begin(), corpus_domains().end(), d) == corpus_domains().end())
      fail("unknown corpus domain '", d, "' (domains: code, math, prose, translation, instructions)");
  for (const auto& d : corpus_domains())
    if (opt.domains.empty() || std::find(opt.domains.begin(), opt.domains.end(), d) != opt.domains.end())
      domains.push_back(d);
  return domains;
}

// Sources in use: those of the domains written; instructions also need code, prose's GCIDE,
// translation and math.
std::vector<Source*> sources_in_use(std::vector<Source>& all, const std::function<bool(const std::string&)>& wants) {
  const bool instructions = wants("instructions");
  std::vector<Source*> used;
  for (auto& s : all) {
    const bool for_instr = instructions && (s.domain == "code" || s.id == "gcide" || s.domain == "translation");
    if (wants(s.domain) || for_instr) used.push_back(&s);
  }
  return used;
}

// The old manifest, removed (the build is incomplete until the new one is written): its token
// counts survive a rebuild that reproduces the same files.
ojson take_old_manifest(const std::string& out_dir) {
  ojson old_manifest;
  std::error_code ec;
  const std::string path = out_dir + "/manifest.json";
  if (fs::exists(path, ec)) {
    try {
      old_manifest = ojson::parse(read_text_file(path));
    } catch (const std::exception&) {
    }
    fs::remove(path, ec);
  }
  return old_manifest;
}

// The math word-problem generator, as a source (its documents come from generate_math).
Source math_generator_source() {
  Source math;
  math.id = "generator";
  math.domain = "math";
  math.path = "dspark math word-problem generator (" + std::to_string(math_problem_kinds().size()) + " templates)";
  math.licence = "generated by dspark (same licence as dspark)";
  return math;
}

// Loads every source (in parallel; each fills only its own vectors), and generates the math
// problems when `with_math`.
void load_sources(Source& math, bool with_math, const std::vector<Source*>& used, const CorpusOptions& opt,
                  int64_t cap) {
  std::vector<std::function<void()>> jobs;
  if (with_math) jobs.push_back([&] { generate_math(math, opt.seed, cap); });
  // Big sources first so the two cores stay busy.
  std::vector<Source*> order;
  for (Source* s : used)
    if (!s->skipped) order.push_back(s);
  std::stable_sort(order.begin(), order.end(), [](const Source* a, const Source* b) {
    const auto weight = [](const Source* s) {
      return s->id == "gcide" || s->id == "freedict:deu-eng" || s->id == "freedict:eng-deu" ? 0 : 1;
    };
    return weight(a) < weight(b);
  });
  for (Source* s : order)
    jobs.push_back([s, &opt] {
      const double t = now_seconds();
      load_source(*s, opt);
      char buf[160];
      std::snprintf(buf, sizeof buf, "corpus: read %-24s %8zu documents %7.1f MB  (%.1f s)", s->id.c_str(),
                    s->docs.size(), double(s->available_bytes) / 1e6, now_seconds() - t);
      note(opt, buf);
    });
  run_parallel(jobs);
}

// The instructions domain: one pseudo-source per kind (d.kinds, listed in d.sources); turns come
// from the seeds of every source. Per kind, the turns in seeded order; only a prefix of about
// twice the cap can be selected, so only that prefix is materialised.
void collect_instruction_kinds(DomainOut& d, const std::vector<Source*>& used, Source& math, uint64_t seed,
                               int64_t cap) {
  d.kinds.resize(instruction_kinds().size());
  for (size_t k = 0; k < d.kinds.size(); ++k) {
    d.kinds[k].id = instruction_kinds()[k];
    d.kinds[k].domain = "instructions";
  }
  std::vector<Source*> seed_sources = used;
  seed_sources.push_back(&math);
  struct Ref {
    uint64_t key;
    const Seed* seed;
    const Source* from;
    uint64_t hash;
    size_t bytes;
  };
  std::vector<std::vector<Ref>> refs(d.kinds.size());
  for (Source* s : seed_sources)
    for (const auto& sd : s->seeds) {
      const std::string text = chatml(sd.user, sd.assistant);
      const uint64_t h = normalized_hash(text);
      refs[size_t(sd.kind)].push_back({order_key(seed, d.name, h), &sd, s, h, text.size()});
    }
  for (size_t k = 0; k < d.kinds.size(); ++k) {
    auto& r = refs[k];
    std::sort(r.begin(), r.end(), [](const Ref& a, const Ref& b) {
      return a.key != b.key ? a.key < b.key : a.hash < b.hash;
    });
    Source& kind = d.kinds[k];
    std::set<std::string> licences, from;
    int64_t bytes = 0;
    kind.available_docs = int64_t(r.size());
    for (const Ref& x : r) {
      kind.available_bytes += int64_t(x.bytes);
      licences.insert(x.from->licence);
      from.insert(x.from->id);
      if (bytes > 2 * cap + 100000) continue;
      bytes += int64_t(x.bytes);
      Doc doc = make_doc(chatml(x.seed->user, x.seed->assistant), "instructions");
      doc.split = x.seed->split;
      if (doc.split == kTest) doc.evals.push_back({x.seed->user, x.seed->assistant});
      kind.docs.push_back(std::move(doc));
    }
    kind.licence = join(std::vector<std::string>(licences.begin(), licences.end()), "; ");
    kind.path = "ChatML turns made from " + join(std::vector<std::string>(from.begin(), from.end()), ", ");
  }
  for (auto& k : d.kinds) d.sources.push_back(&k);
}

// One domain: its sources, the documents selected from them up to the cap, written with its
// prompts.
DomainOut select_and_write_domain(const std::string& name, const std::vector<Source*>& used, Source& math,
                                  const CorpusOptions& opt, int64_t cap) {
  DomainOut d;
  d.name = name;
  std::vector<const std::vector<Doc>*> pools;
  if (name == "math") {
    d.sources.push_back(&math);
  } else if (name == "instructions") {
    collect_instruction_kinds(d, used, math, opt.seed, cap);
  } else {
    for (Source* s : used)
      if (s->domain == name) d.sources.push_back(s);
  }
  for (Source* s : d.sources) pools.push_back(&s->docs);
  d.picked = select_docs(pools, cap, opt.seed, name, &d.taken_bytes, &d.taken_docs);
  write_domain(d, opt.out_dir, opt.prompts_per_domain);
  char buf[200];
  std::snprintf(buf, sizeof buf, "corpus: %-12s %8lld documents %7.2f MB (train %lld / validation %lld / test %lld), %lld prompts",
                name.c_str(),
                (long long)(d.stats.splits[0].documents + d.stats.splits[1].documents + d.stats.splits[2].documents),
                double(d.stats.splits[0].bytes + d.stats.splits[1].bytes + d.stats.splits[2].bytes) / 1e6,
                (long long)d.stats.splits[0].documents, (long long)d.stats.splits[1].documents,
                (long long)d.stats.splits[2].documents, (long long)d.stats.prompts);
  note(opt, buf);
  return d;
}

// Stale files of domains this build does not write.
void remove_unwritten_domains(const std::string& out_dir, const std::function<bool(const std::string&)>& wants) {
  for (const auto& name : corpus_domains()) {
    if (wants(name)) continue;
    std::error_code ec;
    for (const auto& s : corpus_splits()) fs::remove(out_dir + "/" + name + "/" + s + ".jsonl", ec);
    fs::remove(out_dir + "/prompts/" + name + ".jsonl", ec);
  }
}

// One domain's manifest entry: its sources (with packages, licences and what was taken from
// each), splits and prompts; its files are added to `files`.
ojson domain_manifest(const DomainOut& d, const std::string& out_dir, ojson& files) {
  ojson jd;
  jd["name"] = d.name;
  const int hp = domain_holdout_percent(d.name);
  jd["split_percent"] = {{"train", 100 - 2 * hp}, {"validation", hp}, {"test", hp}};
  std::set<std::string> licences;
  ojson jsources = ojson::array();
  for (size_t i = 0; i < d.sources.size(); ++i) {
    const Source& s = *d.sources[i];
    ojson js;
    js["id"] = s.id;
    if (!s.packages.empty()) {
      ojson pk = ojson::array();
      for (size_t k = 0; k < s.packages.size(); ++k)
        pk.push_back({{"package", s.packages[k]}, {"version", k < s.versions.size() ? s.versions[k] : ""}});
      js["packages"] = pk;
    }
    js["path"] = s.path;
    js["licence"] = s.licence.empty() ? "unknown (not read from a Debian package)" : s.licence;
    if (s.skipped) {
      js["skipped"] = s.skip_reason;
    } else {
      licences.insert(js["licence"].get<std::string>());
      if (!s.files.empty() && s.id != "python-stdlib") js["files"] = s.files;
      if (s.id == "python-stdlib") js["files"] = int64_t(s.files.size());
      js["available_documents"] = s.available_docs >= 0 ? s.available_docs : int64_t(s.docs.size());
      js["available_bytes"] = s.available_bytes;
      js["documents"] = d.taken_docs[i];
      js["bytes"] = d.taken_bytes[i];
    }
    jsources.push_back(js);
  }
  jd["licences"] = ojson(std::vector<std::string>(licences.begin(), licences.end()));
  jd["sources"] = jsources;
  ojson jsplits = ojson::object();
  for (int s = 0; s < 3; ++s) {
    jsplits[corpus_splits()[size_t(s)]] = {{"file", d.split_files[s]},
                                           {"documents", d.stats.splits[s].documents},
                                           {"bytes", d.stats.splits[s].bytes},
                                           {"file_bytes", d.split_file_bytes[s]},
                                           {"crc32", crc32_hex(d.split_crc[s])}};
    files[d.split_files[s]] = {{"bytes", d.split_file_bytes[s]}, {"crc32", crc32_hex(d.split_crc[s])}};
  }
  jd["splits"] = jsplits;
  const uintmax_t pbytes = fs::file_size(out_dir + "/" + d.prompts_file);
  jd["prompts"] = {{"file", d.prompts_file}, {"count", d.stats.prompts}, {"crc32", crc32_hex(d.prompts_crc)}};
  files[d.prompts_file] = {{"bytes", int64_t(pbytes)}, {"crc32", crc32_hex(d.prompts_crc)}};
  return jd;
}

// The manifest, written last: the build's domains and files, its config, and the old manifest's
// token counts when the files are the same.
void write_manifest(const CorpusOptions& opt, const std::vector<DomainOut>& outs, const ojson& config,
                    const ojson& old_manifest) {
  ojson m;
  m["format"] = "dspark-corpus-1";
  m["seed"] = opt.seed;
  m["max_mb"] = opt.max_mb;
  m["document_format"] = "JSON Lines, one {\"text\": ...} per document";
  ojson jdomains = ojson::array();
  ojson files = ojson::object();
  for (auto& d : outs) jdomains.push_back(domain_manifest(d, opt.out_dir, files));
  m["domains"] = jdomains;
  m["files"] = files;
  m["config"] = config;
  if (old_manifest.is_object() && old_manifest.contains("tokens") && old_manifest.contains("files") &&
      same_json(old_manifest["files"], files))
    m["tokens"] = old_manifest["tokens"];
  const std::string text = m.dump(2) + "\n";
  write_file_atomic(opt.out_dir + "/manifest.json", text.data(), text.size());
}

}  // namespace

CorpusResult build_corpus(const CorpusOptions& opt) {
  const double t0 = now_seconds();
  if (opt.out_dir.empty()) fail("corpus build: no output directory given");
  if (!(opt.max_mb > 0)) fail("corpus build: --max-mb must be positive (got ", opt.max_mb, ")");
  if (opt.prompts_per_domain < 0) fail("corpus build: prompts per domain must not be negative");

  const std::vector<std::string> domains = chosen_domains(opt);
  const std::function<bool(const std::string&)> wants = [&](const std::string& d) {
    return std::find(domains.begin(), domains.end(), d) != domains.end();
  };
  std::vector<Source> all = plan_sources(opt);
  std::vector<Source*> used = sources_in_use(all, wants);
  if (opt.use_packages) resolve_packages(used, opt);

  std::vector<Source> used_copy_for_config;
  for (Source* s : used) used_copy_for_config.push_back(*s);
  const ojson config = config_json(opt, domains, used_copy_for_config);
  used_copy_for_config.clear();
  if (opt.use_packages && !opt.force && up_to_date(opt.out_dir, config)) {
    note(opt, "corpus: " + opt.out_dir + " already holds this build (seed " + std::to_string(opt.seed) +
                  "); nothing to do (--force rebuilds)");
    CorpusResult r;
    r.up_to_date = true;
    r.seconds = now_seconds() - t0;
    return r;
  }

  const ojson old_manifest = take_old_manifest(opt.out_dir);
  fs::create_directories(opt.out_dir);

  const int64_t cap = int64_t(opt.max_mb * 1e6);
  Source math = math_generator_source();
  load_sources(math, wants("math") || wants("instructions"), used, opt, cap);

  // Select, write.
  std::vector<DomainOut> outs;
  for (const auto& name : domains) outs.push_back(select_and_write_domain(name, used, math, opt, cap));
  remove_unwritten_domains(opt.out_dir, wants);
  write_manifest(opt, outs, config, old_manifest);

  CorpusResult r;
  for (const auto& d : outs) r.domains.push_back(d.stats);
  r.seconds = now_seconds() - t0;
  return r;
}

}  // namespace dspark::data

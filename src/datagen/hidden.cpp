#include "datagen/hidden.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/crc32.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "core/progress.h"
#include "core/safetensors.h"
#include "core/timer.h"
#include "datagen/hidden_dataset.h"
#include "datagen/regen_file.h"
#include "model/forward.h"
#include "runtime/context_limit.h"

namespace dspark::datagen {

namespace fs = std::filesystem;
using json = nlohmann::json;

uint32_t regen_input_crc(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask) {
  std::vector<uint8_t> bytes(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int b = 0; b < 4; ++b) bytes[i * 4 + size_t(b)] = uint8_t(uint32_t(ids[i]) >> (8 * b));
  return crc32_bytes(mask.data(), mask.size(), crc32_bytes(bytes.data(), bytes.size()));
}

namespace {

std::string sample_file(int64_t index, int shard_size) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "shard-%05lld/sample-%06lld.safetensors", (long long)(index / shard_size),
                (long long)index);
  return buf;
}

std::string ids_str(const std::vector<int>& ids) { return json(ids).dump(); }

// Speculators / vLLM number the hidden state entering layer i as i: our output of layer l is l + 1.
std::vector<int> speculators_ids(const std::vector<int>& ids) {
  std::vector<int> out;
  for (int l : ids) out.push_back(l + 1);
  return out;
}

json manifest_header(const Model& model, const std::string& regen_jsonl, const RegenFile& regen,
                     const HiddenOptions& opt) {
  const ModelConfig& c = model.config();
  const int L = c.num_layers;
  json m;
  m["format"] = kHiddenFormat;
  m["version"] = kHiddenFormatVersion;
  m["target"] = {{"path", opt.target_path},
                 {"config_crc32", opt.target_config_crc32},
                 {"architecture", c.architecture},
                 {"num_layers", L},
                 {"hidden_size", c.hidden_size},
                 {"vocab_size", c.vocab_size},
                 {"weights_dtype", dtype_name(model.dtype())}};
  m["source"] = {{"path", regen_jsonl},
                 {"records", int64_t(regen.records.size())},
                 {"crc32", crc32_hex(regen.crc32)}};
  m["layer_ids"] = opt.layer_ids;
  m["layer_ids_convention"] =
      "dspark: id l is the output of decoder layer l (0-based), -1 the embeddings";
  m["speculators_layer_ids"] = speculators_ids(opt.layer_ids);
  m["speculators_layer_ids_convention"] =
      "vLLM/Speculators (eagle_aux_hidden_state_layer_ids): id i is the hidden state entering layer i, "
      "i.e. our id + 1; 0 is the embeddings";
  m["final_slot"] = "final_norm";
  m["final_slot_meaning"] =
      "hidden_states[:, n_layers] is the final-normed hidden state (the model's final RMSNorm applied to the "
      "last decoder layer's output: what lm_head reads). Speculators' last slot (id " +
      std::to_string(L) + ") holds the same state before that norm.";
  m["hidden_states_shape"] = "[tokens, n_layers + 1, hidden_size]";
  m["n_layers"] = int(opt.layer_ids.size());
  m["hidden_size"] = c.hidden_size;
  m["dtype"] = "BF16";
  m["token_ids_dtype"] = "I64";
  m["loss_mask_dtype"] = "U8";
  m["shard_size"] = opt.shard_size;
  return m;
}

// A previous run's manifest must describe the same data.
void check_compatible(const json& old, const json& now, const std::string& path) {
  auto same = [&](const json& a, const json& b, const char* what) {
    if (a != b)
      fail(path, ": was made with ", what, " ", a.dump(), ", this run asks for ", b.dump(),
           "; use another --out (or delete the directory)");
  };
  if (!old.is_object() || old.value("format", "") != kHiddenFormat)
    fail(path, ": not a ", kHiddenFormat, " manifest");
  same(old.value("version", json()), now["version"], "format version");
  same(old.value("layer_ids", json()), now["layer_ids"], "layer ids");
  same(old.value("hidden_size", json()), now["hidden_size"], "hidden size");
  same(old.value("shard_size", json()), now["shard_size"], "shard size");
  const json old_crc = old.contains("target") ? old["target"].value("config_crc32", json("")) : json("");
  const json new_crc = now["target"]["config_crc32"];
  if (old_crc != "" && new_crc != "") same(old_crc, new_crc, "a target whose config.json has CRC32");
}

bool same_path(const std::string& a, const std::string& b) {
  if (a == b) return true;
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  return !ea && !eb && ca == cb;
}

// The samples of a previous run are records of its source, so a rerun must read the same one.
// The same content (CRC32 and record count) is a resume wherever the file lives now. The same
// path with other content is that source edited or grown in place (regenerate resumed): every
// sample is then checked against its record and those that no longer match are dropped. Other
// content at another path is refused: resuming would keep samples of records it does not have.
void check_source(const json& old, const json& now, const std::string& manifest_path,
                  const std::function<void(const std::string&)>& log) {
  const json src = old.contains("source") && old["source"].is_object() ? old["source"] : json::object();
  const std::string old_path = src.contains("path") && src["path"].is_string() ? src["path"].get<std::string>() : "";
  const std::string new_path = now["source"]["path"];
  const json old_crc = src.value("crc32", json()), old_records = src.value("records", json());
  const bool same_content = old_crc == now["source"]["crc32"] && old_records == now["source"]["records"];
  auto describe = [](const std::string& path, const json& records, const json& crc) {
    return path + " (" + (records.is_null() ? std::string("?") : records.dump()) + " records, CRC32 " +
           (crc.is_string() ? crc.get<std::string>() : std::string("unknown")) + ")";
  };
  if (same_content) return;
  if (!same_path(old_path, new_path))
    fail(manifest_path, ": was made from ", describe(old_path, old_records, old_crc), ", this run reads ",
         describe(new_path, now["source"]["records"], now["source"]["crc32"]),
         "; its samples are not records of that file: use another --out (or delete the directory)");
  log("note: " + new_path + " changed since the last run (now " +
      describe(new_path, now["source"]["records"], now["source"]["crc32"]) +
      "); every sample is checked against its record");
}

// The manifest entry `e` was computed from record `r` (same id, length and input CRC).
bool describes_record(const json& e, const RegenRecord& r) {
  try {
    return e.value("id", int64_t(-1)) == r.id && e.value("tokens", int64_t(-1)) == int64_t(r.input_ids.size()) &&
           e.value("input_crc32", "") == crc32_hex(regen_input_crc(r.input_ids, r.loss_mask));
  } catch (const json::exception&) {
    return false;  // a hand-edited entry of the wrong type
  }
}

// Sample i's file is where it belongs and has the CRC32 the entry records.
bool file_matches(const json& e, int64_t i, const std::string& out_dir, int shard_size) {
  try {
    const std::string file = (fs::path(out_dir) / sample_file(i, shard_size)).string();
    return e.value("file", "") == sample_file(i, shard_size) && fs::is_regular_file(file) &&
           e.value("crc32", "") == crc32_hex(crc32_file(file));
  } catch (const json::exception&) {
    return false;
  }
}

// extract_hidden's steps, in the order it runs them.

void check_hidden_options(const ModelConfig& c, const HiddenOptions& opt) {
  if (opt.layer_ids.empty()) fail("no target layers to store (give --layers or --drafter)");
  for (size_t i = 0; i < opt.layer_ids.size(); ++i) {
    const int l = opt.layer_ids[i];
    if (l < -1 || l >= c.num_layers)
      fail("target layer ", l, " is outside [-1, ", c.num_layers - 1, "] (the target has ", c.num_layers, " layers)");
    if (std::count(opt.layer_ids.begin(), opt.layer_ids.end(), l) > 1) fail("target layer ", l, " is listed twice");
  }
  if (opt.shard_size < 1) fail("shard size must be at least 1");
  if (opt.max_batch_tokens < 1) fail("max_batch_tokens must be at least 1");
}

// The engine's length rule: a sequence of T tokens needs T <= max_model_len (the positions the
// target was trained for); past it the hidden states are garbage a drafter would learn from. And
// every token inside the target's vocabulary.
void check_records(const std::vector<RegenRecord>& records, const std::string& regen_jsonl, const ModelConfig& c) {
  const int max_model_len = resolve_max_model_len(c, 0);
  for (size_t i = 0; i < records.size(); ++i) {
    const int64_t T = int64_t(records[i].input_ids.size());
    if (T > max_model_len)
      fail(regen_jsonl, ": record ", i, " (id ", records[i].id, ") has ", T, " tokens, more than the target's maximum ",
           "model length of ", max_model_len, " (max_position_embeddings: positions past it were never trained)");
    for (int32_t t : records[i].input_ids)
      if (t >= c.vocab_size)
        fail(regen_jsonl, ": record ", i, " (id ", records[i].id, ") holds token ", t, ", outside the target's vocabulary (",
             c.vocab_size, ")");
  }
}

// The sample entries of a previous run's manifest, once it is checked to describe the same data.
std::map<int64_t, json> previous_entries(const std::string& manifest_path, const json& manifest,
                                         const std::function<void(const std::string&)>& log) {
  std::map<int64_t, json> entries;  // sample index -> manifest entry
  json old;
  try {
    old = json::parse(read_text_file(manifest_path));
  } catch (const json::exception& e) {
    fail(manifest_path, ": not valid JSON (", e.what(), ")");
  }
  check_compatible(old, manifest, manifest_path);
  check_source(old, manifest, manifest_path, log);
  if (old.contains("samples") && old["samples"].is_array())
    for (const auto& e : old["samples"])
      if (e.is_object() && e.contains("index") && e["index"].is_number_integer()) entries[e["index"].get<int64_t>()] = e;
  return entries;
}

// What extract_hidden's steps share: the run's options and source (its first n records), and the
// manifest entries and figures they update.
struct HiddenRun {
  const HiddenOptions& opt;
  const std::string& regen_jsonl;
  const std::vector<RegenRecord>& records;
  const std::string& out_dir;
  int64_t n;
  int slots;    // layers stored + the final-normed state
  int64_t H;    // hidden size
  std::map<int64_t, json> entries;  // sample index -> manifest entry
  HiddenStats st;
  std::function<void(const std::string&)> log;
};

// Entries that no longer describe the source never stay listed, in range or not: beyond its
// records (a shorter source), or computed from another record.
void drop_stale_entries(HiddenRun& run) {
  for (auto it = run.entries.begin(); it != run.entries.end();) {
    const int64_t i = it->first;
    if (i >= 0 && i < int64_t(run.records.size()) && describes_record(it->second, run.records[size_t(i)])) {
      ++it;
      continue;
    }
    if (i >= 0 && i < run.n) {
      run.log("sample " + std::to_string(i) + " (" + sample_file(i, run.opt.shard_size) +
              ") is stale; computing it again");
      ++run.st.repaired;
    } else {
      run.log("sample " + std::to_string(i) + " is not a record of " + run.regen_jsonl + " (any more); dropped");
      std::error_code ec;
      if (i >= 0) fs::remove(fs::path(run.out_dir) / sample_file(i, run.opt.shard_size), ec);
    }
    it = run.entries.erase(it);
  }
}

// Which samples are still to compute: those not already done, listed (from the same record,
// drop_stale_entries) with a file whose CRC matches.
std::vector<int64_t> samples_to_compute(HiddenRun& run) {
  std::vector<int64_t> todo;
  for (int64_t i = 0; i < run.n; ++i) {
    auto it = run.entries.find(i);
    if (it != run.entries.end() && !file_matches(it->second, i, run.out_dir, run.opt.shard_size)) {
      run.log("sample " + std::to_string(i) + " (" + sample_file(i, run.opt.shard_size) +
              ") is missing or damaged; computing it again");
      ++run.st.repaired;
      run.entries.erase(it);
      it = run.entries.end();
    }
    if (it != run.entries.end()) ++run.st.skipped;
    else todo.push_back(i);
  }
  return todo;
}

void write_hidden_manifest(const HiddenRun& run, json& manifest, const std::string& manifest_path) {
  json samples = json::array();
  for (const auto& [i, e] : run.entries) samples.push_back(e);
  // Every entry is a record of the source (pruned above): complete once a run over all of them
  // has them all.
  manifest["complete"] = run.n == int64_t(run.records.size()) && int64_t(run.entries.size()) == run.n;
  manifest["num_samples"] = int64_t(run.entries.size());
  manifest["samples"] = std::move(samples);
  const std::string text = manifest.dump(1) + "\n";
  write_file_atomic(manifest_path, text.data(), text.size());
  manifest.erase("samples");
}

// A sample being computed: its KV sequence and its hidden states so far.
struct Live {
  int64_t index;
  int seq;
  std::vector<uint16_t> hs;  // [T][slots][H] bf16
};

// Writes sample s's safetensors file and its manifest entry.
void write_sample(HiddenRun& run, Live& s) {
  const RegenRecord& r = run.records[size_t(s.index)];
  const int64_t T = int64_t(r.input_ids.size());
  const std::string rel = sample_file(s.index, run.opt.shard_size);
  const fs::path path = fs::path(run.out_dir) / rel;
  fs::create_directories(path.parent_path());
  std::vector<int64_t> ids(r.input_ids.begin(), r.input_ids.end());
  SafetensorsWriter w;
  w.add("hidden_states", DType::BF16, {T, run.slots, run.H}, s.hs.data());
  w.add("token_ids", DType::I64, {T}, ids.data());
  w.add("loss_mask", DType::U8, {T}, r.loss_mask.data());
  w.set_metadata("format", std::string(kHiddenFormat) + "/" + std::to_string(kHiddenFormatVersion));
  w.set_metadata("id", std::to_string(r.id));
  w.set_metadata("layer_ids", ids_str(run.opt.layer_ids));
  w.set_metadata("speculators_layer_ids", ids_str(speculators_ids(run.opt.layer_ids)));
  w.set_metadata("last_slot", "final_norm");
  w.write(path.string());
  run.entries[s.index] = {{"index", s.index},
                          {"file", rel},
                          {"id", r.id},
                          {"tokens", T},
                          {"loss_tokens", r.loss_tokens()},
                          {"crc32", crc32_hex(crc32_file(path.string()))},
                          {"input_crc32", crc32_hex(regen_input_crc(r.input_ids, r.loss_mask))}};
  ++run.st.written;
}

// Computes the `todo` samples' hidden states, shard by shard (`commit` writes the manifest after
// each), in forward passes of up to max_batch_tokens rows: a sequence too long for one pass
// carries over to the next.
void compute_samples(const Model& model, HiddenRun& run, const std::vector<int64_t>& todo,
                     const std::function<void()>& commit) {
  const ModelConfig& c = model.config();
  const HiddenOptions& opt = run.opt;
  const int n_layers = int(opt.layer_ids.size());
  const int slots = run.slots;
  const int64_t H = run.H;
  // KV room: a sequence carried over from the previous pass plus one pass of rows, each
  // sequence rounding up to whole blocks.
  int64_t max_len = 0;
  for (int64_t i : todo) max_len = std::max<int64_t>(max_len, int64_t(run.records[size_t(i)].input_ids.size()));
  const int64_t capacity = max_len + opt.max_batch_tokens + int64_t(kKvBlock) * (opt.max_batch_tokens + 2);
  KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, model.dtype(), capacity);
  Forward fwd(model, kv);
  ForwardRequest req;
  req.tap_layers = opt.layer_ids;
  req.logits = false;
  req.final_hidden = true;

  struct Span {
    size_t live;  // index into `live`
    int64_t offset, count;
  };
  ProgressBar bar("hidden", int64_t(todo.size()), opt.progress);

  // Shard by shard, so the manifest can be committed after each.
  size_t at = 0;
  Batch b;
  std::vector<Live> live;
  std::vector<Span> spans;
  while (at < todo.size()) {
    const int64_t shard = todo[at] / opt.shard_size;
    size_t end = at;
    while (end < todo.size() && todo[end] / opt.shard_size == shard) ++end;
    size_t q = at;
    int64_t offset = 0;
    while (q < end) {
      b.clear();
      spans.clear();
      int64_t budget = opt.max_batch_tokens;
      while (budget > 0 && q < end) {
        const RegenRecord& r = run.records[size_t(todo[q])];
        const int64_t T = int64_t(r.input_ids.size());
        if (offset == 0) {
          live.push_back(Live{todo[q], kv.create_sequence(), {}});
          live.back().hs.resize(size_t(T * slots * H));
        }
        const int seq = live.back().seq;
        const int64_t count = std::min(T - offset, budget);
        for (int64_t t = offset; t < offset + count; ++t) b.add(r.input_ids[size_t(t)], int32_t(t), seq, true);
        spans.push_back({live.size() - 1, offset, count});
        budget -= count;
        offset += count;
        if (offset == T) {
          ++q;
          offset = 0;
        }
      }
      const ForwardOutput& o = fwd.run(b, req);
      ++run.st.forwards;
      run.st.tokens += b.size();
      int row = 0;
      for (const Span& sp : spans) {
        Live& s = live[sp.live];
        for (int64_t t = sp.offset; t < sp.offset + sp.count; ++t, ++row) {
          uint16_t* dst = s.hs.data() + size_t(t * slots * H);
          for (int l = 0; l < n_layers; ++l) convert_f32_to_bf16(o.tap(row, l), dst + l * H, size_t(H));
          convert_f32_to_bf16(o.final_row(row), dst + n_layers * H, size_t(H));
        }
      }
      // Every sequence but possibly the last is complete now.
      const bool last_open = offset != 0;
      const size_t complete = live.size() - (last_open ? 1 : 0);
      for (size_t k = 0; k < complete; ++k) {
        write_sample(run, live[k]);
        kv.free_sequence(live[k].seq);
      }
      live.erase(live.begin(), live.begin() + long(complete));
      bar.update(run.st.written, run.st.tokens);
    }
    commit();
    at = end;
  }
  bar.finish(run.st.written, run.st.tokens);
}

}  // namespace

HiddenStats extract_hidden(const Model& model, const std::string& regen_jsonl, const std::string& out_dir,
                           const HiddenOptions& opt) {
  const double t_start = now_seconds();
  auto log = opt.log ? opt.log : [](const std::string& s) { std::fprintf(stderr, "datagen hidden: %s\n", s.c_str()); };
  const ModelConfig& c = model.config();
  check_hidden_options(c, opt);

  RegenFile regen = read_regen_file(regen_jsonl);
  if (regen.truncated_tail) log("warning: " + regen_jsonl + " ends in a partial line; it is left out");
  const auto& records = regen.records;
  check_records(records, regen_jsonl, c);
  const int64_t n = opt.limit < 0 ? int64_t(records.size()) : std::min<int64_t>(opt.limit, int64_t(records.size()));

  fs::create_directories(out_dir);
  const std::string manifest_path = (fs::path(out_dir) / "manifest.json").string();
  json manifest = manifest_header(model, regen_jsonl, regen, opt);
  HiddenRun run{opt, regen_jsonl, records, out_dir, n, int(opt.layer_ids.size()) + 1, c.hidden_size, {}, {}, log};
  const bool had_manifest = fs::exists(manifest_path);
  if (had_manifest) run.entries = previous_entries(manifest_path, manifest, log);

  run.st.samples = n;
  drop_stale_entries(run);
  const std::vector<int64_t> todo = samples_to_compute(run);
  auto write_manifest = [&] { write_hidden_manifest(run, manifest, manifest_path); };

  // A rerun with work to do replaces the old manifest first (pruned, not complete): a crash
  // mid-run must not leave it listing dropped samples or claiming a source that changed.
  if (had_manifest && !todo.empty()) write_manifest();
  if (todo.empty()) {
    write_manifest();
    run.st.seconds = now_seconds() - t_start;
    return run.st;
  }

  compute_samples(model, run, todo, write_manifest);
  run.st.seconds = now_seconds() - t_start;
  return run.st;
}

}  // namespace dspark::datagen

#include "datagen/regenerate.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <unordered_set>

#include "core/error.h"
#include "core/mmap_file.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/timer.h"
#include "datagen/regen_file.h"
#include "model/forward.h"
#include "runtime/context_limit.h"
#include "runtime/generate.h"

namespace dspark::datagen {

namespace fs = std::filesystem;

std::vector<int32_t> regen_stop_tokens(const Tokenizer& tok, const ModelConfig& cfg) {
  std::vector<int32_t> out = chat_stop_tokens(tok, detect_chat_format(tok));
  for (int id : cfg.eos_token_ids)
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  return out;
}

std::vector<std::vector<int32_t>> regen_turn_tokens(const Tokenizer& tok, ChatFormat fmt, const RegenPrompt& p,
                                                    int32_t* end_of_turn) {
  if (p.turns.empty()) fail("prompt ", p.id, " has no user turn");
  std::vector<ChatMessage> msgs;
  if (!p.system.empty()) msgs.push_back({"system", p.system});
  msgs.push_back({"user", p.turns[0]});
  std::vector<std::vector<int32_t>> out;
  out.push_back(tok.encode(apply_chat_template(fmt, msgs, true)));
  if (end_of_turn) *end_of_turn = -1;
  // Later turns: render the conversation with a placeholder answer and take the text after it.
  // It starts with the template's end-of-turn token, which the target must have generated.
  static const std::string kAnswer = "DSPARKANSWERPLACEHOLDER";
  for (size_t k = 1; k < p.turns.size(); ++k) {
    msgs.push_back({"assistant", kAnswer});
    msgs.push_back({"user", p.turns[k]});
    const std::string text = apply_chat_template(fmt, msgs, true);
    const size_t at = text.rfind(kAnswer);
    std::string after = text.substr(at + kAnswer.size());
    int32_t eot = -1;
    for (int32_t id : chat_stop_tokens(tok, fmt)) {
      const std::string spelled = tok.token_bytes(id);
      if (!spelled.empty() && after.rfind(spelled, 0) == 0) {
        eot = id;
        after.erase(0, spelled.size());
        break;
      }
    }
    if (eot < 0) fail("the chat template does not end an assistant turn with a stop token");
    if (end_of_turn) *end_of_turn = eot;
    out.push_back(tok.encode(after));
  }
  return out;
}

namespace {

// OUT.meta.json: the settings the output was made with.
void check_settings(const std::string& out_path, bool output_has_data, const nlohmann::json& settings,
                    const std::function<void(const std::string&)>& log) {
  if (settings.is_null() || settings.empty()) return;
  const std::string meta_path = out_path + ".meta.json";
  if (output_has_data && fs::exists(meta_path)) {
    nlohmann::json old;
    try {
      old = nlohmann::json::parse(read_text_file(meta_path));
    } catch (const nlohmann::json::exception& e) {
      fail(meta_path, ": not valid JSON (", e.what(), ")");
    }
    // Every key of either run, so a setting this run lacks (a --response-format the first run had)
    // counts too.
    const auto shown = [](const nlohmann::json& j, const std::string& key) {
      return j.contains(key) ? j[key].dump() : std::string("(unset)");
    };
    nlohmann::json keys = old;
    keys.update(settings);
    for (const auto& item : keys.items()) {
      const std::string& key = item.key();
      if (old.contains(key) != settings.contains(key) || (old.contains(key) && old[key] != settings[key]))
        fail(out_path, " was made with ", key, " = ", shown(old, key), " (", meta_path, "), this run has ",
             shown(settings, key), "; resume with the same settings or use another --out");
    }
    return;
  }
  if (output_has_data) log("warning: " + out_path + " has no " + meta_path + "; resuming without checking settings");
  const std::string text = settings.dump(2) + "\n";
  write_file_atomic(meta_path, text.data(), text.size());
}

struct Work {
  const RegenPrompt* prompt;
  std::vector<std::vector<int32_t>> turns;  // regen_turn_tokens
  int32_t end_of_turn = -1;                 // the token that lets a conversation go on
  int64_t need = 0;                         // KV positions this conversation can reach
};

// A conversation ends where the engine's length rule says: prompt + generated tokens never pass
// max_model_len. The first turn must leave room for a token (else the prompt is refused before
// any work); a later turn that does not fit ends the conversation with "length".
int64_t reachable_positions(const Work& w, int max_tokens, int max_model_len) {
  int64_t need = 0;
  for (const auto& t : w.turns) need += int64_t(t.size()) + max_tokens;
  return std::min<int64_t>(need, max_model_len);
}

struct Live {
  size_t work = 0;  // index into the work list
  int seq = -1;
  Rng rng{0, 0};
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  size_t turn = 0;
  int turn_generated = 0;
  int turn_budget = 0;  // tokens this turn may generate (generation_budget)
  int32_t last = -1;  // the newest sampled token, not yet in the KV cache
  bool done = false;
  std::string finish;
  std::optional<LogitsProcessor> proc;  // this turn's (RegenOptions::logits); empty: none
};

// regenerate's steps, in the order it runs them.

void check_regen_options(const Model& model, const Tokenizer& tok, const RegenOptions& opt) {
  opt.sampling.validate();
  if (opt.max_tokens < 1) fail("max_tokens must be at least 1");
  if (opt.batch < 1 || opt.batch > 4096) fail("batch must be between 1 and 4096");
  if (opt.prefill_chunk < 1) fail("prefill_chunk must be at least 1");
  const ModelConfig& cfg = model.config();
  if (tok.vocab_size() > cfg.vocab_size)
    fail("the tokenizer has ", tok.vocab_size(), " tokens but the model's vocabulary is ", cfg.vocab_size);
  opt.logits.validate(cfg.vocab_size);
}

// What the output already holds (the ids of its records); a partial last line (a crash
// mid-write) is cut off, and the settings are checked against OUT.meta.json.
std::unordered_set<int64_t> resume_output(const std::string& out_path, const RegenOptions& opt,
                                          const std::function<void(const std::string&)>& log, RegenStats& st) {
  if (const fs::path parent = fs::path(out_path).parent_path(); !parent.empty()) fs::create_directories(parent);
  RegenFile existing = read_regen_file(out_path, /*missing_ok=*/true);
  if (existing.truncated_tail) {
    log("warning: " + out_path + " ends in a partial line (an interrupted run); dropping it");
    fs::resize_file(out_path, existing.good_bytes);
    st.dropped_partial_line = true;
  }
  check_settings(out_path, !existing.records.empty(), opt.settings, log);
  std::unordered_set<int64_t> done_ids;
  for (const auto& r : existing.records) done_ids.insert(r.id);
  return done_ids;
}

// The work list: prompts in range, not done, in id order, each tokenized turn by turn.
std::vector<Work> work_list(const std::vector<RegenPrompt>& prompts, const std::unordered_set<int64_t>& done_ids,
                            const Tokenizer& tok, ChatFormat fmt, const RegenOptions& opt, int max_model_len,
                            RegenStats& st) {
  std::unordered_set<int64_t> seen;
  std::vector<const RegenPrompt*> in_range;
  for (const auto& p : prompts) {
    if (!seen.insert(p.id).second) fail("prompt id ", p.id, " appears twice");
    if (opt.limit < 0 || p.id < opt.limit) in_range.push_back(&p);
  }
  std::sort(in_range.begin(), in_range.end(), [](const RegenPrompt* a, const RegenPrompt* b) { return a->id < b->id; });
  st.prompts = int64_t(in_range.size());
  std::vector<Work> work;
  for (const RegenPrompt* p : in_range) {
    if (done_ids.count(p->id)) {
      ++st.already_done;
      continue;
    }
    Work w{p, {}, -1, 0};
    w.turns = regen_turn_tokens(tok, fmt, *p, &w.end_of_turn);
    try {
      check_prompt_length(int64_t(w.turns[0].size()), max_model_len);
    } catch (const Error& e) {
      fail("prompt ", p->id, " (chat-templated): ", e.what());
    }
    w.need = reachable_positions(w, opt.max_tokens, max_model_len);
    work.push_back(std::move(w));
  }
  return work;
}

// KV room for the `batch` longest conversations at once (plus a partly used block each).
int64_t kv_capacity(const std::vector<Work>& work, int batch) {
  std::vector<int64_t> needs;
  for (const auto& w : work) needs.push_back(w.need + kKvBlock);
  const size_t live_max = std::min(needs.size(), size_t(batch));
  std::partial_sort(needs.begin(), needs.begin() + long(live_max), needs.end(), std::greater<int64_t>());
  int64_t capacity = 2 * kKvBlock;  // the padding row's sequence
  for (size_t i = 0; i < live_max; ++i) capacity += needs[i];
  return capacity;
}

// The generation loop: up to `batch` conversations live in slots; each round refills the free
// slots (a prefill each) and decodes one token for every live one. Finished records are written
// in work-list order.
struct RegenLoop {
  RegenLoop(const RegenOptions& opt, const std::vector<Work>& work, const std::vector<int32_t>& stops,
            const std::string& out_path, FILE* out, KvCache& kv, Forward& fwd, int pad_seq, int max_model_len,
            int vocab, RegenStats& st)
      : opt(opt), work(work), stops(stops), out_path(out_path), out(out), kv(kv), fwd(fwd), pad_seq(pad_seq),
        max_model_len(max_model_len), vocab(vocab), st(st) {}

  const RegenOptions& opt;
  const std::vector<Work>& work;
  const std::vector<int32_t>& stops;
  const std::string& out_path;
  FILE* out;
  KvCache& kv;
  Forward& fwd;
  int pad_seq;
  int max_model_len;
  int vocab;
  RegenStats& st;

  Sampler sampler;
  std::map<size_t, std::string> pending;  // finished records waiting for their turn to be written
  size_t next_write = 0;
  std::vector<Live> slots = std::vector<Live>(size_t(opt.batch));
  std::vector<bool> occupied = std::vector<bool>(size_t(opt.batch), false);
  size_t next_work = 0;
  Batch b;
  ForwardRequest req;
  std::vector<size_t> row_slot;
  std::vector<int32_t> sampled;
  std::vector<float> row;  // a processed copy of a logits row (RegenOptions::logits)

  void flush_ready() {
    for (auto it = pending.begin(); it != pending.end() && it->first == next_write; it = pending.erase(it)) {
      const std::string& line = it->second;
      if (std::fwrite(line.data(), 1, line.size(), out) != line.size() || std::fflush(out) != 0)
        fail(out_path, ": write failed");
      ++next_write;
    }
  }

  // A new assistant turn: the processor starts from an empty output (the repetition penalty sees
  // the conversation so far as its prompt).
  void start_turn(Live& a) {
    if (opt.logits.any()) a.proc.emplace(opt.logits, std::span<const int32_t>(a.tokens), vocab);
  }
  int32_t sample(Live& a, const float* logits) {
    if (opt.on_logits) opt.on_logits(work[a.work].prompt->id, logits, vocab);
    if (!a.proc) return sampler.sample(logits, vocab, opt.sampling, a.rng);
    row.assign(logits, logits + vocab);
    a.proc->apply(row.data());
    const int32_t t = sampler.sample(row.data(), vocab, opt.sampling, a.rng);
    a.proc->push(t);
    return t;
  }

  bool is_stop(int32_t t) const { return std::find(stops.begin(), stops.end(), t) != stops.end(); }

  // Takes a sampled token; may prefill the next user turn (a forward pass) and sample again.
  void accept(Live& a, int32_t token) {
    for (;;) {
      a.tokens.push_back(token);
      a.mask.push_back(1);
      ++a.turn_generated;
      ++st.response_tokens;
      const Work& w = work[a.work];
      if (is_stop(token)) {
        a.finish = "stop";
        if (token != w.end_of_turn || a.turn + 1 >= w.turns.size()) {
          a.done = true;
          return;
        }
        // The next user turn: feed the end-of-turn token and the turn's prompt tokens, if they
        // leave room for a token under the length rule.
        const auto& next = w.turns[a.turn + 1];
        const int budget = generation_budget(int64_t(a.tokens.size() + next.size()), opt.max_tokens, max_model_len);
        if (budget == 0) {
          a.finish = "length";
          a.done = true;
          return;
        }
        ++a.turn;
        a.turn_generated = 0;
        a.turn_budget = budget;
        std::vector<int32_t> feed{token};
        feed.insert(feed.end(), next.begin(), next.end());
        a.tokens.insert(a.tokens.end(), next.begin(), next.end());
        a.mask.insert(a.mask.end(), next.size(), 0);
        const float* logits = prefill(fwd, a.seq, feed, opt.prefill_chunk);
        ++st.forwards;
        start_turn(a);
        token = sample(a, logits);
        continue;
      }
      if (a.turn_generated >= a.turn_budget) {  // --max-tokens, or the maximum model length
        a.finish = "length";
        a.done = true;
        return;
      }
      a.last = token;
      return;
    }
  }

  void retire(Live& a) {
    const Work& w = work[a.work];
    RegenRecord r;
    r.id = w.prompt->id;
    r.input_ids = std::move(a.tokens);
    r.loss_mask = std::move(a.mask);
    r.prompt_tokens = int(w.turns[0].size());
    r.finish_reason = a.finish;
    pending.emplace(a.work, regen_record_line(r) + "\n");
    kv.free_sequence(a.seq);
    ++st.generated;
    flush_ready();
  }

  // Refills free slots: prefills a new prompt alone and samples its first token.
  void refill_slots() {
    for (size_t s = 0; s < slots.size(); ++s) {
      while (!occupied[s] && next_work < work.size()) {
        Live& a = slots[s];
        a = Live{};
        a.work = next_work++;
        const Work& w = work[a.work];
        a.seq = kv.create_sequence();
        a.rng = Rng(opt.sampling.seed, uint64_t(w.prompt->id));
        a.tokens = w.turns[0];
        a.mask.assign(a.tokens.size(), 0);
        a.turn_budget = generation_budget(int64_t(a.tokens.size()), opt.max_tokens, max_model_len);
        const float* logits = prefill(fwd, a.seq, a.tokens, opt.prefill_chunk);
        ++st.forwards;
        start_turn(a);
        accept(a, sample(a, logits));
        if (a.done) retire(a);
        else occupied[s] = true;
      }
    }
  }

  // One decode step over every live sequence; false when none is live.
  bool decode_step() {
    b.clear();
    row_slot.clear();
    for (size_t s = 0; s < slots.size(); ++s) {
      if (!occupied[s]) continue;
      const Live& a = slots[s];
      b.add(a.last, int32_t(a.tokens.size()) - 1, a.seq, true);
      row_slot.push_back(s);
    }
    if (row_slot.empty()) return false;
    // A lone row gets a padding row (see regenerate.h): bf16 GEMMs of one row sum differently.
    if (row_slot.size() == 1) b.add(0, 0, pad_seq, true);
    const ForwardOutput& o = fwd.run(b, req);
    ++st.forwards;
    sampled.clear();
    for (size_t r = 0; r < row_slot.size(); ++r) {
      sampled.push_back(sample(slots[row_slot[r]], o.logits_row(int(r))));
    }
    // `o` is invalid from here on: accept() may run prefills.
    for (size_t r = 0; r < row_slot.size(); ++r) {
      Live& a = slots[row_slot[r]];
      accept(a, sampled[r]);
      if (a.done) {
        retire(a);
        occupied[row_slot[r]] = false;
      }
    }
    return true;
  }
};

}  // namespace

RegenStats regenerate(const Model& model, const Tokenizer& tok, const std::vector<RegenPrompt>& prompts,
                      const std::string& out_path, const RegenOptions& opt) {
  const double t_start = now_seconds();
  auto log = opt.log ? opt.log : [](const std::string& s) { std::fprintf(stderr, "datagen regenerate: %s\n", s.c_str()); };
  check_regen_options(model, tok, opt);
  const ModelConfig& cfg = model.config();
  const int max_model_len = resolve_max_model_len(cfg, 0);
  const ChatFormat fmt = detect_chat_format(tok);
  const std::vector<int32_t> stops = regen_stop_tokens(tok, cfg);

  RegenStats st;
  const std::unordered_set<int64_t> done_ids = resume_output(out_path, opt, log, st);
  const std::vector<Work> work = work_list(prompts, done_ids, tok, fmt, opt, max_model_len, st);
  if (work.empty()) {
    st.seconds = now_seconds() - t_start;
    return st;
  }

  KvCache kv(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, model.dtype(), kv_capacity(work, opt.batch));
  Forward fwd(model, kv);
  const int pad_seq = kv.create_sequence();

  FILE* out = std::fopen(out_path.c_str(), "ab");
  if (!out) fail(out_path, ": cannot open for appending");
  struct Closer {
    FILE* f;
    ~Closer() { std::fclose(f); }
  } closer{out};

  RegenLoop loop{opt, work, stops, out_path, out, kv, fwd, pad_seq, max_model_len, cfg.vocab_size, st};
  ProgressBar bar("regenerate", int64_t(work.size()), opt.progress);
  for (;;) {
    loop.refill_slots();
    if (!loop.decode_step()) break;
    bar.update(st.generated, st.response_tokens);
  }
  if (!loop.pending.empty() || loop.next_write != work.size())
    fail("regenerate: internal error: records left unwritten");
  bar.finish(st.generated, st.response_tokens);
  st.seconds = now_seconds() - t_start;
  return st;
}

}  // namespace dspark::datagen

// The exactly-once bookkeeping of `dspark train drafter --online` (docs/online-training.md):
//   OUT/online_journal.jsonl   what happened to each prompt, appended and fsync'ed as it happens:
//       {"event": "sent", "prompt": i, "attempt": a, "handle": h, "server": s}  before a request
//       {"prompt": i, "handle": h, "server": s, "token_ids": [...]}  a verified response's handle
//                                                       and generated ids (no "event")
//       {"event": "corrupt", "prompt": i, "handle": h, "why": w}   a sample skipped (re-requested)
//       {"event": "failed", "prompt": i, "why": w}                  a prompt given up
//   the checkpoint's state.json, extra.online: the prompts trained up to its step, and the length
//       of OUT/online_consumed.jsonl at that step.
//   OUT/online_consumed.jsonl  one line per trained sample {"prompt", "handle", "step", "server"}.
// A resumed run replays the journal against the checkpoint's trained set (plan_resume), so that
// no prompt is trained twice and none is lost.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dspark::train {

// Prompt indices as sorted disjoint ranges: a checkpoint's trained set stays small when prompts
// are trained roughly in order.
class IndexSet {
 public:
  void insert(int64_t i);
  bool contains(int64_t i) const;
  int64_t size() const { return size_; }
  int64_t ranges() const { return int64_t(r_.size()); }
  nlohmann::json to_json() const;  // [[begin, end), ...]
  // Error naming `where` when `j` is not a list of increasing, disjoint [begin, end) pairs.
  static IndexSet from_json(const nlohmann::json& j, const std::string& where);
  bool operator==(const IndexSet& o) const { return r_ == o.r_; }

 private:
  std::map<int64_t, int64_t> r_;  // begin -> end
  int64_t size_ = 0;
};

struct JournalEntry {
  enum class Kind { Sent, Handle, Corrupt, Failed };
  Kind kind = Kind::Handle;
  int64_t prompt = -1;
  int attempt = -1;    // Sent: the request's a<k>
  std::string handle;  // Sent: the handle its request id gives; Handle, Corrupt: the sample's
  std::string server;  // Sent, Handle
  std::string why;     // Corrupt, Failed
  std::vector<int32_t> generated;  // Handle: the response's choices[0].token_ids
  nlohmann::json to_json() const;
};

// Reads a journal (absent: empty). A last line cut short by a crash is dropped, and with `repair`
// cut off the file so that appends start on a fresh line; any other malformed line is an Error
// naming the file and line.
std::vector<JournalEntry> read_journal(const std::string& path, bool repair);

// An append-only JSONL file whose every line is on disk (fsync) before append returns.
// Thread-safe.
class SyncedLog {
 public:
  SyncedLog() = default;
  explicit SyncedLog(const std::string& path, bool sync_each = true);
  ~SyncedLog();
  SyncedLog(const SyncedLog&) = delete;
  SyncedLog& operator=(const SyncedLog&) = delete;
  void append(const nlohmann::json& line);
  void sync();      // fsync (after appends with sync_each false)
  int64_t bytes();  // the file's length so far
  const std::string& path() const { return path_; }

 private:
  std::mutex mu_;
  std::string path_;
  int fd_ = -1;
  bool sync_each_ = true;
  int64_t bytes_ = 0;
};

// Cuts `path` to `bytes` (a checkpoint's view of it). Error naming the file when it is shorter.
void truncate_file(const std::string& path, int64_t bytes);

constexpr int kMaxCorruptAttempts = 3;  // corrupt samples of one prompt before it is given up

struct PromptState {
  int next_attempt = 0;  // the next request's a<k> (request ids are never reused)
  int corrupt = 0;       // corrupt samples so far
};

struct ResumeFetch {
  int64_t prompt = -1;
  std::string handle, server;
  std::vector<int32_t> generated;  // the journaled response's ids (the sample is checked on them)
};

// What a (resumed) run does before requesting anything.
struct ResumePlan {
  std::vector<ResumeFetch> fetch;   // journaled, untrained: read from the store again
  std::vector<std::string> remove;  // delete from the store now (trained, corrupt, superseded,
                                    // or sent without a journaled response)
  std::vector<int64_t> request;     // never journaled with a usable handle: request, ascending
  std::vector<int64_t> failed;      // given up (journaled, or kMaxCorruptAttempts corrupt samples)
  std::map<int64_t, PromptState> state;  // per prompt the journal mentions
};

// The pure replay: a prompt in `trained` is done (its handles removed); a failed one stays
// failed; an untrained one with a response whose handle no corrupt entry follows is fetched again
// (every other handle of it removed); any other prompt below n_prompts is requested. Error naming
// `journal_path` when the journal names a prompt at or past n_prompts (another --prompts file).
ResumePlan plan_resume(int64_t n_prompts, const std::vector<JournalEntry>& journal,
                       const IndexSet& trained, const std::string& journal_path);

}  // namespace dspark::train

#include "train/online_ledger.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/mmap_file.h"
#include "datagen/prompts.h"

namespace dspark::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

void IndexSet::insert(int64_t i) {
  if (contains(i)) return;
  ++size_;
  auto next = r_.upper_bound(i);
  const bool joins_next = next != r_.end() && next->first == i + 1;
  if (next != r_.begin()) {
    auto prev = std::prev(next);
    if (prev->second == i) {  // extends the range before
      prev->second = i + 1;
      if (joins_next) {
        prev->second = next->second;
        r_.erase(next);
      }
      return;
    }
  }
  if (joins_next) {
    const int64_t end = next->second;
    r_.erase(next);
    r_[i] = end;
    return;
  }
  r_[i] = i + 1;
}

bool IndexSet::contains(int64_t i) const {
  auto it = r_.upper_bound(i);
  if (it == r_.begin()) return false;
  --it;
  return i >= it->first && i < it->second;
}

json IndexSet::to_json() const {
  json out = json::array();
  for (const auto& [b, e] : r_) out.push_back({b, e});
  return out;
}

IndexSet IndexSet::from_json(const json& j, const std::string& where) {
  IndexSet s;
  if (!j.is_array())
    fail(where, ": expected a list of [begin, end) pairs, got ", j.dump().substr(0, 80));
  int64_t last = -1;
  for (const auto& p : j) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer())
      fail(where, ": expected [begin, end) pairs of integers, got ", p.dump().substr(0, 80));
    const int64_t b = p[0].get<int64_t>(), e = p[1].get<int64_t>();
    if (b < 0 || e <= b || b <= last)
      fail(where, ": range ", p.dump(), " is empty, negative or not after the one before");
    s.r_[b] = e;
    s.size_ += e - b;
    last = e;
  }
  return s;
}

json JournalEntry::to_json() const {
  switch (kind) {
    case Kind::Sent:
      return {{"event", "sent"},
              {"prompt", prompt},
              {"attempt", attempt},
              {"handle", handle},
              {"server", server}};
    case Kind::Handle:
      return {{"prompt", prompt}, {"handle", handle}, {"server", server}, {"token_ids", generated}};
    case Kind::Corrupt:
      return {{"event", "corrupt"}, {"prompt", prompt}, {"handle", handle}, {"why", why}};
    case Kind::Failed:
      return {{"event", "failed"}, {"prompt", prompt}, {"why", why}};
  }
  return {};
}

namespace {

JournalEntry parse_entry(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_number_integer() ||
      j["prompt"].get<int64_t>() < 0)
    fail(where, ": expected an object with a non-negative integer \"prompt\"");
  JournalEntry e;
  e.prompt = j["prompt"].get<int64_t>();
  auto str = [&](const char* k, bool required) {
    if (!j.contains(k)) {
      if (required) fail(where, ": field \"", k, "\" is missing");
      return std::string();
    }
    if (!j[k].is_string()) fail(where, ": field \"", k, "\" must be a string");
    return j[k].get<std::string>();
  };
  const std::string event = str("event", false);
  if (event.empty()) {
    e.kind = JournalEntry::Kind::Handle;
    e.handle = str("handle", true);
    e.server = str("server", false);
    if (!j.contains("token_ids") || !j["token_ids"].is_array())
      fail(where, ": field \"token_ids\" must be a list of token ids");
    for (const auto& x : j["token_ids"]) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
        fail(where, ": field \"token_ids\" holds ", x.dump().substr(0, 40), ", not a token id");
      e.generated.push_back(int32_t(x.get<int64_t>()));
    }
  } else if (event == "sent") {
    e.kind = JournalEntry::Kind::Sent;
    e.handle = str("handle", true);
    e.server = str("server", false);
    if (!j.contains("attempt") || !j["attempt"].is_number_integer() || j["attempt"].get<int>() < 0)
      fail(where, ": field \"attempt\" must be a non-negative integer");
    e.attempt = j["attempt"].get<int>();
  } else if (event == "corrupt") {
    e.kind = JournalEntry::Kind::Corrupt;
    e.handle = str("handle", true);
    e.why = str("why", false);
  } else if (event == "failed") {
    e.kind = JournalEntry::Kind::Failed;
    e.why = str("why", false);
  } else {
    fail(where, ": unknown event '", event, "'");
  }
  return e;
}

}  // namespace

std::vector<JournalEntry> read_journal(const std::string& path, bool repair) {
  std::vector<JournalEntry> out;
  if (!fs::exists(path)) return out;
  const std::string text = read_text_file(path);
  // A crash can cut the last line short: everything after the last newline is dropped.
  const size_t complete = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  datagen::for_each_line(text.substr(0, complete), [&](std::string_view line, int64_t number) {
    const std::string where = path + ":" + std::to_string(number);
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) fail(where, ": not JSON");
    out.push_back(parse_entry(j, where));
  });
  if (repair && complete < text.size()) truncate_file(path, int64_t(complete));
  return out;
}

SyncedLog::SyncedLog(const std::string& path, bool sync_each) : path_(path), sync_each_(sync_each) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path, ": cannot open for appending: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) == 0) bytes_ = int64_t(st.st_size);
}

SyncedLog::~SyncedLog() {
  if (fd_ >= 0) ::close(fd_);
}

void SyncedLog::append(const json& line) {
  const std::string text = line.dump() + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) fail("append to a closed log");
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path_, ": write failed: ", std::strerror(errno));
    done += size_t(n);
  }
  bytes_ += int64_t(text.size());
  if (sync_each_ && ::fsync(fd_) != 0) fail(path_, ": fsync failed: ", std::strerror(errno));
}

void SyncedLog::sync() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ >= 0 && ::fsync(fd_) != 0) fail(path_, ": fsync failed: ", std::strerror(errno));
}

int64_t SyncedLog::bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

void truncate_file(const std::string& path, int64_t bytes) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) fail(path, ": cannot read its size: ", ec.message());
  if (int64_t(size) < bytes)
    fail(path, ": holds ", size, " bytes, fewer than the ", bytes,
         " the checkpoint recorded (the file was edited or replaced)");
  if (int64_t(size) == bytes) return;
  if (::truncate(path.c_str(), off_t(bytes)) != 0)
    fail(path, ": cannot truncate to ", bytes, " bytes: ", std::strerror(errno));
}

ResumePlan plan_resume(int64_t n_prompts, const std::vector<JournalEntry>& journal,
                       const IndexSet& trained, const std::string& journal_path) {
  struct Seen {
    std::vector<std::string> handles;  // every handle of the prompt, in journal order
    std::string usable, server;        // the last response's handle, unless a corrupt entry follows
    std::vector<int32_t> generated;
    bool failed = false;
  };
  std::map<int64_t, Seen> seen;
  ResumePlan plan;
  for (size_t k = 0; k < journal.size(); ++k) {
    const JournalEntry& e = journal[k];
    if (e.prompt >= n_prompts)
      fail(journal_path, ": entry ", k + 1, " names prompt ", e.prompt, " but --prompts has ",
           n_prompts, ": resume with the --prompts file the run started with");
    Seen& s = seen[e.prompt];
    PromptState& st = plan.state[e.prompt];
    if (!e.handle.empty()) s.handles.push_back(e.handle);
    switch (e.kind) {
      case JournalEntry::Kind::Sent:
        st.next_attempt = std::max(st.next_attempt, e.attempt + 1);
        break;
      case JournalEntry::Kind::Handle:
        s.usable = e.handle;
        s.server = e.server;
        s.generated = e.generated;
        break;
      case JournalEntry::Kind::Corrupt:
        ++st.corrupt;
        if (s.usable == e.handle) s.usable.clear();
        break;
      case JournalEntry::Kind::Failed:
        s.failed = true;
        break;
    }
  }
  std::set<std::string> removed;
  auto remove = [&](const std::string& h) {
    if (!h.empty() && removed.insert(h).second) plan.remove.push_back(h);
  };
  for (auto& [p, s] : seen) {
    const PromptState& st = plan.state[p];
    const bool done = trained.contains(p);
    const bool failed = !done && (s.failed || st.corrupt >= kMaxCorruptAttempts);
    const bool fetch = !done && !failed && !s.usable.empty();
    for (const std::string& h : s.handles)
      if (!(fetch && h == s.usable)) remove(h);
    if (failed) plan.failed.push_back(p);
    if (fetch) plan.fetch.push_back({p, s.usable, s.server, s.generated});
  }
  for (int64_t p = 0; p < n_prompts; ++p) {
    if (trained.contains(p)) continue;
    auto it = seen.find(p);
    if (it == seen.end()) {
      plan.request.push_back(p);
      continue;
    }
    const bool failed = it->second.failed || plan.state[p].corrupt >= kMaxCorruptAttempts;
    if (!failed && it->second.usable.empty()) plan.request.push_back(p);
  }
  return plan;
}

}  // namespace dspark::train

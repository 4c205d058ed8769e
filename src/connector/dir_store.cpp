// The directory backend (vLLM's ExampleHiddenStatesConnector layout): DIR/{handle}.safetensors,
// then DIR/{handle}.meta.json renamed into place last as the commit marker.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "connector/store_common.h"
#include "core/dtype.h"
#include "core/mmap_file.h"
#include "core/safetensors.h"

namespace dspark::connector::detail {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Why = SampleUnusable::Why;

constexpr std::string_view kMetaSuffix = ".meta.json";

DType file_dtype(const std::string& manifest_dtype) {
  if (manifest_dtype == "bfloat16") return DType::BF16;
  if (manifest_dtype == "float32") return DType::F32;
  return DType::I64;
}

// A write that failed for lack of space (the message of write_file_atomic names errno's text).
bool is_full(const char* what) {
  return std::strstr(what, std::strerror(ENOSPC)) || std::strstr(what, std::strerror(EDQUOT));
}

class DirStore final : public HiddenStatesStore {
 public:
  DirStore(std::string url, fs::path dir) : url_(std::move(url)), dir_(std::move(dir)) {}

  std::string url() const override { return url_; }

  void put_sample(const HiddenSample& s) override {
    check_sample(s);
    const std::string tokens = token_bytes(s.token_ids);
    const std::string meta = dump_manifest(ok_manifest(s, tokens));
    const std::string st = tensors_path(s.handle), mf = meta_path(s.handle);
    try {
      // An older sample under this handle stops being committed before its tensors change.
      remove(mf);
      SafetensorsWriter w;
      const int64_t n = s.num_tokens();
      w.add(kHiddenStates, file_dtype(s.dtype), {n, int64_t(s.layer_ids.size()), s.hidden},
            s.hidden_bytes.data());
      w.add(kTokenIds, DType::I64, {n}, tokens.data());
      w.write(st);
      write_file_atomic(mf, meta.data(), meta.size());
    } catch (const Error& e) {
      std::error_code ec;
      for (const std::string& p : {mf + ".tmp", mf, st + ".tmp", st}) fs::remove(p, ec);
      if (is_full(e.what())) throw StoreFull(url_ + ": " + e.what());
      if (dynamic_cast<const StoreError*>(&e)) throw;
      throw StoreError(url_ + ": " + e.what());
    }
  }

  void put_error(const std::string& handle, const std::string& message) override {
    check_handle(handle);
    const std::string meta = dump_manifest(error_manifest(message));
    const std::string mf = meta_path(handle);
    try {
      remove(tensors_path(handle));
      write_file_atomic(mf, meta.data(), meta.size());
    } catch (const Error& e) {
      std::error_code ec;
      fs::remove(mf + ".tmp", ec);
      if (is_full(e.what())) throw StoreFull(url_ + ": " + e.what());
      if (dynamic_cast<const StoreError*>(&e)) throw;
      throw StoreError(url_ + ": " + e.what());
    }
  }

  std::optional<json> get_manifest(const std::string& handle) override {
    check_handle(handle);
    const std::string mf = meta_path(handle);
    std::error_code ec;
    if (!fs::exists(mf, ec)) {
      if (ec) throw StoreError(url_ + ": " + mf + ": " + ec.message());
      return std::nullopt;
    }
    std::string text;
    try {
      text = read_text_file(mf);
    } catch (const Error& e) {
      if (!fs::exists(mf, ec) && !ec) return std::nullopt;  // deleted meanwhile
      throw StoreError(url_ + ": " + e.what());
    }
    return parse_manifest_text(text, handle, url_);
  }

  HiddenSample get_sample(const std::string& handle) override {
    const std::optional<json> manifest = get_manifest(handle);
    const std::string where = "hidden-states sample \"" + handle + "\" (" + url_ + "): ";
    if (!manifest) throw SampleUnusable(Why::Missing, where + "no manifest " + meta_path(handle));
    const CheckedManifest m = check_manifest(*manifest, handle, url_);
    const std::string st = tensors_path(handle);
    std::unique_ptr<SafetensorsFile> file;
    try {
      file = std::make_unique<SafetensorsFile>(st);
    } catch (const Error& e) {
      std::error_code ec;
      if (!fs::exists(st, ec))
        throw SampleUnusable(Why::Missing,
                             where + "the manifest is committed but " + st + " is absent");
      throw SampleUnusable(Why::Crc, where + "unreadable tensor file: " + e.what());
    }
    auto bytes = [&](const char* name, const TensorSpec& spec) {
      auto it = file->tensors().find(name);
      if (it == file->tensors().end())
        throw SampleUnusable(Why::Missing, where + st + " has no tensor " + name);
      const TensorView& t = it->second;
      if (t.dtype != file_dtype(spec.dtype) || t.shape != spec.shape)
        throw SampleUnusable(Why::Shape, where + st + ": tensor " + name + " is " +
                                             dtype_name(t.dtype) + " " + t.shape_str() +
                                             ", the manifest says " + spec.dtype);
      return std::string(reinterpret_cast<const char*>(t.data), t.nbytes);
    };
    std::string hidden = bytes(kHiddenStates, m.hidden);
    const std::string tokens = bytes(kTokenIds, m.tokens);
    return make_sample(handle, url_, m, std::move(hidden), tokens);
  }

  void delete_sample(const std::string& handle) override {
    check_handle(handle);
    const std::string mf = meta_path(handle), st = tensors_path(handle);
    for (const std::string& p : {mf, st, mf + ".tmp", st + ".tmp"}) remove(p);
  }

  std::vector<std::string> handles(const std::string& prefix) override {
    std::vector<std::string> out;
    std::error_code ec;
    fs::directory_iterator it(dir_, ec), end;
    if (ec) throw StoreError(url_ + ": cannot list " + dir_.string() + ": " + ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) throw StoreError(url_ + ": cannot list " + dir_.string() + ": " + ec.message());
      const std::string name = it->path().filename().string();
      if (!name.ends_with(kMetaSuffix)) continue;
      const std::string h = name.substr(0, name.size() - kMetaSuffix.size());
      if (h.starts_with(prefix) && valid_handle(h)) out.push_back(h);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  void reconnect() override {}

 private:
  std::string tensors_path(const std::string& h) const {
    return (dir_ / (h + ".safetensors")).string();
  }
  std::string meta_path(const std::string& h) const {
    return (dir_ / (h + std::string(kMetaSuffix))).string();
  }
  void remove(const std::string& p) const {
    std::error_code ec;
    fs::remove(p, ec);
    if (ec) throw StoreError(url_ + ": cannot remove " + p + ": " + ec.message());
  }

  std::string url_;
  fs::path dir_;
};

}  // namespace

std::unique_ptr<HiddenStatesStore> open_dir_store(const std::string& url, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec))
    fail("hidden-states store URL \"", url, "\": cannot create the directory ", dir,
         ec ? ": " + ec.message() : std::string(": not a directory"));
  return std::make_unique<DirStore>(url, fs::path(dir));
}

}  // namespace dspark::connector::detail

#include "datagen/hidden_dataset.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/crc32.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "core/safetensors.h"

namespace dspark::datagen {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const json& field(const json& j, const char* name, const std::string& where) {
  if (!j.is_object() || !j.contains(name)) fail(where, ": missing field \"", name, "\"");
  return j[name];
}

int64_t int_field(const json& j, const char* name, const std::string& where, int64_t lo) {
  const json& v = field(j, name, where);
  if (!v.is_number_integer() || v.get<int64_t>() < lo)
    fail(where, ": field \"", name, "\" must be an integer >= ", lo);
  return v.get<int64_t>();
}

std::string str_field(const json& j, const char* name, const std::string& where) {
  const json& v = field(j, name, where);
  if (!v.is_string()) fail(where, ": field \"", name, "\" must be a string");
  return v.get<std::string>();
}

// The samples must be what the header says: sample k is record `index` of the source, indices
// rise and stay below its record count, and a complete manifest lists every record. A manifest
// that disagrees (say, samples of an older, longer source kept beside a new one) would train on
// sequences that are not in the data, so it is refused rather than read.
void check_samples_agree(const json& m, const std::string& mp) {
  const json& samples = m["samples"];
  const int64_t records = int_field(field(m, "source", mp), "records", mp + ": source", 0);
  const int64_t listed = int_field(m, "num_samples", mp, 0);
  if (listed != int64_t(samples.size()))
    fail(mp, ": field \"num_samples\" is ", listed, " but \"samples\" lists ", samples.size());
  int64_t prev = -1;
  for (size_t i = 0; i < samples.size(); ++i) {
    const std::string where = mp + ": samples[" + std::to_string(i) + "]";
    const int64_t index = int_field(samples[i], "index", where, 0);
    if (index <= prev) fail(where, ": index ", index, " does not follow ", prev, " (indices must rise)");
    if (index >= records)
      fail(where, ": index ", index, " is past the source's ", records,
           " records (a sample of another source?); rerun datagen hidden into a new directory");
    prev = index;
  }
  const json& complete = field(m, "complete", mp);
  if (!complete.is_boolean()) fail(mp, ": field \"complete\" must be true or false");
  if (complete.get<bool>() && listed != records)
    fail(mp, ": claims to be complete with ", listed, " samples, but its source has ", records, " records");
}

}  // namespace

HiddenDataset HiddenDataset::open(const std::string& dir) {
  HiddenDataset d;
  d.dir_ = dir;
  d.manifest_path_ = (fs::path(dir) / "manifest.json").string();
  const std::string& mp = d.manifest_path_;
  if (!fs::exists(mp)) fail(mp, ": missing (not a hidden-state directory, or its first shard never finished)");
  try {
    d.manifest_ = json::parse(read_text_file(mp));
  } catch (const json::exception& e) {
    fail(mp, ": not valid JSON (", e.what(), ")");
  }
  const json& m = d.manifest_;
  if (str_field(m, "format", mp) != kHiddenFormat) fail(mp, ": field \"format\" is not \"", kHiddenFormat, "\"");
  const int64_t version = int_field(m, "version", mp, 0);
  if (version != kHiddenFormatVersion)
    fail(mp, ": format version ", version, " is not supported (this build reads version ", kHiddenFormatVersion, ")");
  if (str_field(m, "dtype", mp) != "BF16") fail(mp, ": field \"dtype\" must be \"BF16\"");
  if (str_field(m, "final_slot", mp) != "final_norm") fail(mp, ": field \"final_slot\" must be \"final_norm\"");
  d.hidden_ = int(int_field(m, "hidden_size", mp, 1));
  const json& ids = field(m, "layer_ids", mp);
  if (!ids.is_array() || ids.empty()) fail(mp, ": field \"layer_ids\" must be a non-empty list");
  for (const auto& x : ids) {
    if (!x.is_number_integer() || x.get<int64_t>() < -1) fail(mp, ": field \"layer_ids\" must hold layer ids >= -1");
    d.layer_ids_.push_back(x.get<int>());
    d.spec_ids_.push_back(x.get<int>() + 1);
  }
  if (int_field(m, "n_layers", mp, 1) != int64_t(d.layer_ids_.size()))
    fail(mp, ": field \"n_layers\" does not match \"layer_ids\"");
  const json& samples = field(m, "samples", mp);
  if (!samples.is_array()) fail(mp, ": field \"samples\" must be a list");
  check_samples_agree(m, mp);
  for (size_t i = 0; i < samples.size(); ++i) {
    const std::string where = mp + ": samples[" + std::to_string(i) + "]";
    const json& s = samples[i];
    Entry e;
    e.file = str_field(s, "file", where);
    if (e.file.empty() || fs::path(e.file).is_absolute() || e.file.find("..") != std::string::npos)
      fail(where, ": field \"file\" must be a relative path inside the directory");
    e.id = int_field(s, "id", where, 0);
    e.tokens = int_field(s, "tokens", where, 1);
    e.loss_tokens = int_field(s, "loss_tokens", where, 0);
    if (e.loss_tokens > e.tokens) fail(where, ": more loss tokens than tokens");
    e.crc = parse_crc32_hex(str_field(s, "crc32", where), where + ".crc32");
    const std::string path = (fs::path(dir) / e.file).string();
    if (!fs::is_regular_file(path)) fail(path, ": missing sample file (listed in ", mp, ")");
    d.entries_.push_back(std::move(e));
  }
  return d;
}

const HiddenDataset::Entry& HiddenDataset::entry(size_t i) const {
  if (i >= entries_.size()) fail(manifest_path_, ": sample ", i, " requested, the dataset holds ", entries_.size());
  return entries_[i];
}

int64_t HiddenDataset::tokens(size_t i) const { return entry(i).tokens; }
int64_t HiddenDataset::loss_tokens(size_t i) const { return entry(i).loss_tokens; }
int64_t HiddenDataset::id(size_t i) const { return entry(i).id; }
std::string HiddenDataset::file(size_t i) const { return (fs::path(dir_) / entry(i).file).string(); }

void HiddenDataset::verify() const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    const std::string path = file(i);
    const uint32_t crc = crc32_file(path);
    if (crc != entries_[i].crc)
      fail(path, ": CRC32 mismatch (the manifest says ", crc32_hex(entries_[i].crc), ", the file has ", crc32_hex(crc), ")");
  }
}

HiddenDataset::Sample HiddenDataset::load(size_t i) const {
  const Entry& e = entry(i);
  const std::string path = file(i);
  if (!fs::is_regular_file(path)) fail(path, ": missing sample file (listed in ", manifest_path_, ")");
  // The CRC first, so a damaged file is reported as such rather than as a bad header.
  {
    MappedFile raw(path);
    const uint32_t crc = crc32_bytes(raw.data(), raw.size());
    if (crc != e.crc)
      fail(path, ": CRC32 mismatch (the manifest says ", crc32_hex(e.crc), ", the file has ", crc32_hex(crc), ")");
  }
  SafetensorsFile f(path);
  const int slots = int(layer_ids_.size()) + 1;
  auto tensor = [&](const char* name, DType dtype, const std::vector<int64_t>& shape) -> const TensorView& {
    auto it = f.tensors().find(name);
    if (it == f.tensors().end()) fail(path, ": missing tensor \"", name, "\"");
    const TensorView& t = it->second;
    if (t.dtype != dtype)
      fail(path, ": tensor \"", name, "\" has dtype ", dtype_name(t.dtype), ", expected ", dtype_name(dtype));
    if (t.shape != shape) {
      TensorView want;
      want.shape = shape;
      fail(path, ": tensor \"", name, "\" has shape ", t.shape_str(), ", expected ", want.shape_str());
    }
    return t;
  };
  const int64_t T = e.tokens;
  const TensorView& hs = tensor("hidden_states", DType::BF16, {T, slots, hidden_});
  const TensorView& ids = tensor("token_ids", DType::I64, {T});
  const TensorView& mask = tensor("loss_mask", DType::U8, {T});
  Sample s;
  s.id = e.id;
  s.layers = slots - 1;
  s.hidden = hidden_;
  s.tokens.resize(size_t(T));
  const auto* id_data = reinterpret_cast<const int64_t*>(ids.data);
  for (int64_t t = 0; t < T; ++t) {
    int64_t v;
    std::memcpy(&v, id_data + t, 8);
    if (v < 0 || v > INT32_MAX) fail(path, ": token_ids[", t, "] = ", v, " is not a token id");
    s.tokens[size_t(t)] = int32_t(v);
  }
  s.loss_mask.assign(mask.data, mask.data + T);
  int64_t loss = 0;
  for (uint8_t m : s.loss_mask) {
    if (m > 1) fail(path, ": loss_mask holds a value other than 0 and 1");
    loss += m;
  }
  if (loss != e.loss_tokens)
    fail(path, ": loss_mask has ", loss, " loss tokens, the manifest says ", e.loss_tokens);
  s.hidden_states.resize(size_t(hs.numel()));
  convert_to_f32(DType::BF16, hs.data, s.hidden_states.data(), s.hidden_states.size());
  return s;
}

}  // namespace dspark::datagen

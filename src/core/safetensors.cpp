#include "core/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>

#include "core/error.h"

namespace dspark {

namespace fs = std::filesystem;
using json = nlohmann::json;

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

static std::string shape_string(const std::vector<int64_t>& shape) {
  TensorView v;
  v.shape = shape;
  return v.shape_str();
}

namespace {

// nlohmann::json keeps the last of duplicate keys without a word. In a header that hides a
// tensor (or one of its fields) that still owns bytes of the data section, so duplicates are
// found while parsing. `dup` receives the keys leading to the first duplicate (outermost first:
// {tensor} for a repeated tensor name, {tensor, field} for a repeated field); empty if none.
json parse_json_unique(const char* begin, const char* end, std::vector<std::string>* dup) {
  struct Frame {
    std::unordered_set<std::string> keys;
    std::string last;
  };
  std::vector<Frame> stack;
  dup->clear();
  auto cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      stack.emplace_back();
    } else if (ev == json::parse_event_t::object_end) {
      if (!stack.empty()) stack.pop_back();
    } else if (ev == json::parse_event_t::key && !stack.empty()) {
      std::string key = parsed.get<std::string>();
      if (!stack.back().keys.insert(key).second && dup->empty()) {
        for (size_t i = 0; i + 1 < stack.size(); ++i) dup->push_back(stack[i].last);
        dup->push_back(key);
      }
      stack.back().last = std::move(key);
    }
    return true;
  };
  return json::parse(begin, end, cb, /*allow_exceptions=*/false);
}

struct DataRange {
  uint64_t begin, end;
  std::string tensor;
};

std::string range_str(const DataRange& r) {
  return "'" + r.tensor + "' (bytes " + std::to_string(r.begin) + ".." + std::to_string(r.end) + ")";
}

// Two tensors sharing bytes would alias each other's data: refused, naming both. Empty tensors
// own no bytes and may sit anywhere.
void check_no_overlap(std::vector<DataRange> ranges, const std::string& file) {
  std::erase_if(ranges, [](const DataRange& r) { return r.begin == r.end; });
  std::sort(ranges.begin(), ranges.end(), [](const DataRange& a, const DataRange& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  size_t furthest = 0;  // the range reaching furthest among those before i
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[furthest].end)
      fail(file, ": the data of tensors ", range_str(ranges[furthest]), " and ", range_str(ranges[i]), " overlap");
    if (ranges[i].end > ranges[furthest].end) furthest = i;
  }
}

}  // namespace

std::map<std::string, TensorView> parse_safetensors(const uint8_t* bytes, size_t size,
                                                    const std::string& file,
                                                    std::map<std::string, std::string>* metadata) {
  if (size < 8) fail(file, ": truncated safetensors file (", size, " bytes, no header length)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > size - 8)
    fail(file, ": safetensors header length ", header_len, " exceeds the file size ", size,
         " (truncated file?)");
  if (header_len > (100u << 20)) fail(file, ": safetensors header of ", header_len, " bytes is too large");
  const char* hdr = reinterpret_cast<const char*>(bytes + 8);
  std::vector<std::string> dup;
  json j = parse_json_unique(hdr, hdr + header_len, &dup);
  if (j.is_discarded()) fail(file, ": malformed safetensors header (invalid JSON)");
  if (!j.is_object()) fail(file, ": malformed safetensors header (expected a JSON object)");
  if (!dup.empty()) {
    const std::string what = dup[0] == "__metadata__" ? std::string("__metadata__") : "tensor '" + dup[0] + "'";
    if (dup.size() == 1) fail(file, ": ", what, " appears twice in the safetensors header");
    fail(file, ": ", what, ": key '", dup.back(), "' appears twice in the safetensors header");
  }

  const uint8_t* data = bytes + 8 + header_len;
  size_t data_size = size - 8 - size_t(header_len);
  std::map<std::string, TensorView> out;
  std::vector<DataRange> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) fail(file, ": __metadata__ must be an object");
      if (metadata) {
        for (auto m = e.begin(); m != e.end(); ++m)
          if (m.value().is_string()) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto where = [&] { return file + ": tensor '" + name + "'"; };
    if (!e.is_object()) fail(where(), ": header entry must be an object");
    auto dt = e.find("dtype");
    if (dt == e.end() || !dt->is_string()) fail(where(), ": missing or non-string 'dtype'");
    auto dtype = dtype_from_name(dt->get<std::string>());
    if (!dtype) fail(where(), ": unsupported dtype '", dt->get<std::string>(), "'");
    auto sh = e.find("shape");
    if (sh == e.end() || !sh->is_array()) fail(where(), ": missing or non-array 'shape'");
    TensorView v;
    v.name = name;
    v.dtype = *dtype;
    v.file = file;
    uint64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) fail(where(), ": shape entries must be non-negative integers");
      uint64_t dim = d.get<uint64_t>();
      if (dim > (uint64_t(1) << 40) || (dim && numel > (uint64_t(1) << 48) / dim))
        fail(where(), ": shape is too large");
      numel *= dim;
      v.shape.push_back(int64_t(dim));
    }
    auto off = e.find("data_offsets");
    if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      fail(where(), ": 'data_offsets' must be two non-negative integers");
    uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (end < begin) fail(where(), ": data_offsets end ", end, " is before begin ", begin);
    uint64_t expected = numel * dtype_size(*dtype);
    if (end - begin != expected)
      fail(where(), ": data_offsets span ", end - begin, " bytes but dtype ", dtype_name(*dtype),
           " and shape ", v.shape_str(), " need ", expected);
    if (end > data_size)
      fail(where(), ": data ends at byte ", end, " but the file has only ", data_size,
           " data bytes (truncated file?)");
    v.data = data + begin;
    v.nbytes = size_t(expected);
    ranges.push_back({begin, end, name});
    out.emplace(name, std::move(v));
  }
  check_no_overlap(ranges, file);
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  tensors_ = parse_safetensors(file_.data(), file_.size(), path, &metadata_);
}

std::unique_ptr<TensorStore> TensorStore::open_file(const std::string& path) {
  auto store = std::make_unique<TensorStore>();
  store->source_ = path;
  store->files_.push_back(std::make_unique<SafetensorsFile>(path));
  store->tensors_ = store->files_.back()->tensors();
  return store;
}

std::unique_ptr<TensorStore> TensorStore::open_dir(const std::string& dir) {
  fs::path single = fs::path(dir) / "model.safetensors";
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    auto s = open_file(single.string());
    s->source_ = dir;
    return s;
  }
  if (!fs::exists(index))
    fail(dir, ": no model.safetensors or model.safetensors.index.json in the model directory");
  std::string text = read_text_file(index.string());
  std::vector<std::string> dup;
  json j = parse_json_unique(text.data(), text.data() + text.size(), &dup);
  if (j.is_discarded() || !j.is_object()) fail(index.string(), ": malformed JSON");
  if (dup.size() == 2 && dup[0] == "weight_map")
    fail(index.string(), ": weight_map lists tensor '", dup[1], "' twice");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) fail(index.string(), ": missing object field 'weight_map'");
  auto store = std::make_unique<TensorStore>();
  store->source_ = dir;
  std::map<std::string, size_t> shard_idx;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string())
      fail(index.string(), ": weight_map entry '", it.key(), "' must be a file name");
    std::string shard = it.value().get<std::string>();
    if (shard.find('/') != std::string::npos || shard == "..")
      fail(index.string(), ": weight_map entry '", it.key(), "' names a path outside the directory");
    if (!shard_idx.count(shard)) {
      shard_idx[shard] = store->files_.size();
      store->files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / shard).string()));
    }
    const auto& tensors = store->files_[shard_idx[shard]]->tensors();
    auto t = tensors.find(it.key());
    if (t == tensors.end())
      fail(index.string(), ": tensor '", it.key(), "' is mapped to ", shard, " but that shard lacks it");
    store->tensors_[it.key()] = t->second;
  }
  return store;
}

const TensorView& TensorStore::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(source_, ": missing tensor '", name, "'");
  return it->second;
}

const TensorView& TensorStore::get(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorView& t = get(name);
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    fail(t.file, ": tensor '", name, "' has dtype ", dtype_name(t.dtype),
         ", expected F32, BF16 or F16");
  if (t.shape != shape)
    fail(t.file, ": tensor '", name, "' has shape ", t.shape_str(), ", expected ", shape_string(shape));
  return t;
}

void SafetensorsWriter::add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                            const void* data) {
  Entry e{name, dtype, shape, {}};
  size_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= size_t(d);
  e.bytes.resize(n);
  if (n) std::memcpy(e.bytes.data(), data, n);
  entries_.push_back(std::move(e));
}

void SafetensorsWriter::add_f32(const std::string& name, const std::vector<int64_t>& shape,
                                const float* data, DType stored_as) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  if (stored_as == DType::F32) return add(name, DType::F32, shape, data);
  std::vector<uint16_t> tmp(n);
  if (stored_as == DType::BF16) {
    convert_f32_to_bf16(data, tmp.data(), n);
  } else if (stored_as == DType::F16) {
    for (size_t i = 0; i < n; ++i) tmp[i] = f32_to_f16(data[i]);
  } else {
    fail("cannot store tensor '", name, "' as ", dtype_name(stored_as));
  }
  add(name, stored_as, shape, tmp.data());
}

void SafetensorsWriter::write(const std::string& path) const {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8) h += ' ';  // keep the data section 8-byte aligned
  uint8_t head[8];
  const uint64_t hl = h.size();
  for (int i = 0; i < 8; ++i) head[i] = uint8_t(hl >> (8 * i));
  // Written piece by piece: a copy of every tensor in one buffer would double the peak memory of
  // writing a checkpoint (an 8B model's 16 GB of bf16).
  std::vector<std::span<const uint8_t>> pieces;
  pieces.reserve(entries_.size() + 2);
  pieces.emplace_back(head, sizeof(head));
  pieces.emplace_back(reinterpret_cast<const uint8_t*>(h.data()), h.size());
  for (const Entry& e : entries_) pieces.emplace_back(e.bytes.data(), e.bytes.size());
  write_file_atomic(path, pieces);
}

}  // namespace dspark

#include "core/gguf.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace dspark {

namespace {

constexpr GgmlTypeTraits kUnsupported(const char* name, int block, int bytes) { return {name, block, bytes, false}; }

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t t) {
  switch (t) {
    case 0: return GgmlTypeTraits{"F32", 1, 4, true};
    case 1: return GgmlTypeTraits{"F16", 1, 2, true};
    case 2: return GgmlTypeTraits{"Q4_0", 32, 18, true};
    case 3: return kUnsupported("Q4_1", 32, 20);
    case 6: return GgmlTypeTraits{"Q5_0", 32, 22, true};
    case 7: return kUnsupported("Q5_1", 32, 24);
    case 8: return GgmlTypeTraits{"Q8_0", 32, 34, true};
    case 9: return kUnsupported("Q8_1", 32, 36);
    case 10: return kUnsupported("Q2_K", 256, 84);
    case 11: return kUnsupported("Q3_K", 256, 110);
    case 12: return GgmlTypeTraits{"Q4_K", 256, 144, true};
    case 13: return kUnsupported("Q5_K", 256, 176);
    case 14: return GgmlTypeTraits{"Q6_K", 256, 210, true};
    case 15: return kUnsupported("Q8_K", 256, 292);
    case 30: return GgmlTypeTraits{"BF16", 1, 2, true};
    default: return std::nullopt;
  }
}

const char* ggml_type_name(GgmlType t) {
  const auto tr = ggml_type_traits(uint32_t(t));
  return tr ? tr->name : "?";
}

size_t ggml_row_bytes(GgmlType t, int64_t n) {
  const auto tr = ggml_type_traits(uint32_t(t));
  DSPARK_CHECK(tr && n % tr->block_elems == 0, "ggml_row_bytes: ", n, " elements of ", ggml_type_name(t));
  return size_t(n / tr->block_elems) * size_t(tr->block_bytes);
}

std::optional<GgmlType> ggml_type_from_name(const std::string& name) {
  std::string up = name;
  for (char& c : up) c = char(std::toupper(static_cast<unsigned char>(c)));
  for (uint32_t t = 0; t <= 30; ++t)
    if (const auto tr = ggml_type_traits(t); tr && up == tr->name) return GgmlType(t);
  return std::nullopt;
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::U16: case GgufValueType::I16:
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::U64: case GgufValueType::I64:
    case GgufValueType::BOOL:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_number() const {
  return is_integer() || type == GgufValueType::F32 || type == GgufValueType::F64;
}

const char* gguf_value_type_name(GgufValueType t) {
  static const char* const kNames[] = {"uint8", "int8",   "uint16", "int16", "uint32", "int32",  "float32",
                                       "bool",  "string", "array",  "uint64", "int64", "float64"};
  return uint32_t(t) < 13 ? kNames[uint32_t(t)] : "?";
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

int64_t GgufTensor::rows() const { return ne.empty() ? 0 : numel() / ne[0]; }

std::string GgufTensor::shape_str() const {
  std::ostringstream os;
  os << '[';
  for (size_t i = ne.size(); i-- > 0;) os << ne[i] << (i ? ", " : "");
  os << ']';
  return os.str();
}

namespace {

// A bounds-checked little-endian cursor over the file; every failure names the file and what was
// being read.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n, const std::string& file) : p_(p), n_(n), file_(file) {}
  size_t pos() const { return pos_; }
  size_t left() const { return n_ - pos_; }
  const std::string& file() const { return file_; }

  template <class T>
  T pod(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const std::string& what) {
    const uint64_t len = pod<uint64_t>(what + " (its length)");
    if (len > left()) fail(file_, ": ", what, ": a string of ", len, " bytes runs past the end of the file (", left(),
                           " bytes left; truncated?)");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += size_t(len);
    return s;
  }
  void need(size_t k, const std::string& what) const {
    if (k > left()) fail(file_, ": truncated file: ", what, " needs ", k, " bytes at offset ", pos_, ", ", left(), " left");
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& file_;
};

size_t value_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::BOOL: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
    default: return 0;  // STRING, ARRAY: variable
  }
}

GgufValueType value_type(Reader& r, const std::string& key) {
  const uint32_t t = r.pod<uint32_t>("the type of key '" + key + "'");
  if (t > uint32_t(GgufValueType::F64)) fail(r.file(), ": key '", key, "' has unknown value type ", t);
  return GgufValueType(t);
}

// One scalar of type t into v's integer / number.
void read_scalar(Reader& r, GgufValueType t, const std::string& key, int64_t* integer, double* number) {
  const std::string what = "the value of key '" + key + "'";
  switch (t) {
    case GgufValueType::U8: *integer = r.pod<uint8_t>(what); break;
    case GgufValueType::I8: *integer = r.pod<int8_t>(what); break;
    case GgufValueType::U16: *integer = r.pod<uint16_t>(what); break;
    case GgufValueType::I16: *integer = r.pod<int16_t>(what); break;
    case GgufValueType::U32: *integer = r.pod<uint32_t>(what); break;
    case GgufValueType::I32: *integer = r.pod<int32_t>(what); break;
    case GgufValueType::I64: *integer = r.pod<int64_t>(what); break;
    case GgufValueType::U64: {
      const uint64_t u = r.pod<uint64_t>(what);
      if (u > uint64_t(std::numeric_limits<int64_t>::max())) fail(r.file(), ": key '", key, "': ", u, " is out of range");
      *integer = int64_t(u);
      break;
    }
    case GgufValueType::BOOL: {
      const uint8_t b = r.pod<uint8_t>(what);
      if (b > 1) fail(r.file(), ": key '", key, "': a bool of value ", int(b));
      *integer = b;
      break;
    }
    case GgufValueType::F32: *number = r.pod<float>(what); return;
    case GgufValueType::F64: *number = r.pod<double>(what); return;
    default: fail(r.file(), ": key '", key, "': not a scalar type");
  }
  *number = double(*integer);
}

GgufValue read_value(Reader& r, GgufValueType t, const std::string& key) {
  GgufValue v;
  v.type = t;
  if (t == GgufValueType::STRING) {
    v.str = r.string("the value of key '" + key + "'");
    return v;
  }
  if (t != GgufValueType::ARRAY) {
    read_scalar(r, t, key, &v.integer, &v.number);
    return v;
  }
  v.elem = value_type(r, key + "[]");
  if (v.elem == GgufValueType::ARRAY) fail(r.file(), ": key '", key, "': arrays of arrays are not supported");
  const uint64_t count = r.pod<uint64_t>("the length of array '" + key + "'");
  const size_t min_bytes = v.elem == GgufValueType::STRING ? 8 : value_size(v.elem);
  if (count > r.left() / min_bytes)
    fail(r.file(), ": key '", key, "': an array of ", count, " ", gguf_value_type_name(v.elem),
         " cannot fit in the ", r.left(), " bytes left (truncated or corrupt)");
  if (v.elem == GgufValueType::STRING) {
    v.strings.reserve(size_t(count));
    for (uint64_t i = 0; i < count; ++i) v.strings.push_back(r.string("element " + std::to_string(i) + " of '" + key + "'"));
  } else if (v.elem == GgufValueType::F32 || v.elem == GgufValueType::F64) {
    v.numbers.resize(size_t(count));
    int64_t unused = 0;
    for (auto& x : v.numbers) read_scalar(r, v.elem, key, &unused, &x);
  } else {
    v.integers.resize(size_t(count));
    double unused = 0;
    for (auto& x : v.integers) read_scalar(r, v.elem, key, &x, &unused);
  }
  return v;
}

// Element count of a tensor, refusing products that overflow or exceed any file.
int64_t checked_numel(const std::vector<int64_t>& ne, const std::string& file, const std::string& name) {
  constexpr int64_t kMax = int64_t(1) << 50;
  int64_t n = 1;
  for (int64_t d : ne) {
    if (d <= 0 || d > kMax || n > kMax / d) fail(file, ": tensor '", name, "': absurd dimensions");
    n *= d;
  }
  return n;
}

GgufTensor read_tensor_info(Reader& r, const std::string& file) {
  GgufTensor t;
  t.name = r.string("a tensor name");
  if (t.name.empty()) fail(file, ": a tensor with an empty name");
  const uint32_t nd = r.pod<uint32_t>("the dims of tensor '" + t.name + "'");
  if (nd == 0 || nd > 4) fail(file, ": tensor '", t.name, "' has ", nd, " dimensions (1 to 4 are allowed)");
  for (uint32_t i = 0; i < nd; ++i) {
    const uint64_t d = r.pod<uint64_t>("a dim of tensor '" + t.name + "'");
    if (d == 0 || d > (uint64_t(1) << 50)) fail(file, ": tensor '", t.name, "': dim ", i, " is ", d);
    t.ne.push_back(int64_t(d));
  }
  const uint32_t type = r.pod<uint32_t>("the type of tensor '" + t.name + "'");
  const auto tr = ggml_type_traits(type);
  if (!tr) fail(file, ": tensor '", t.name, "' has unknown ggml type ", type);
  if (!tr->supported)
    fail(file, ": tensor '", t.name, "' is ", tr->name,
         ", which dspark does not read (F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K and Q6_K are read)");
  t.type = GgmlType(type);
  checked_numel(t.ne, file, t.name);
  if (t.ne[0] % tr->block_elems != 0)
    fail(file, ": tensor '", t.name, "' (", tr->name, ") has rows of ", t.ne[0], " elements, not a multiple of its block (",
         tr->block_elems, ")");
  t.nbytes = ggml_row_bytes(t.type, t.ne[0]) * size_t(t.rows());
  t.offset = r.pod<uint64_t>("the offset of tensor '" + t.name + "'");
  return t;
}

}  // namespace

GgufContents parse_gguf(const uint8_t* bytes, size_t size, const std::string& file) {
  Reader r(bytes, size, file);
  GgufContents c;
  if (size < 4 || std::memcmp(bytes, "GGUF", 4) != 0) fail(file, ": not a GGUF file (bad magic)");
  r.pod<uint32_t>("the magic");
  c.version = r.pod<uint32_t>("the version");
  if (c.version == 0x03000000u || c.version == 0x02000000u) fail(file, ": a big-endian GGUF file (only little-endian is read)");
  if (c.version != 2 && c.version != 3) fail(file, ": GGUF version ", c.version, " (versions 2 and 3 are read)");
  const uint64_t n_tensors = r.pod<uint64_t>("the tensor count");
  const uint64_t n_kv = r.pod<uint64_t>("the metadata key count");
  // Each key takes at least 8 + 4 + 1 bytes, each tensor descriptor at least 8 + 4 + 8 + 4 + 8.
  if (n_kv > r.left() / 13) fail(file, ": absurd metadata key count ", n_kv, " for a file of ", size, " bytes");
  if (n_tensors > r.left() / 32) fail(file, ": absurd tensor count ", n_tensors, " for a file of ", size, " bytes");
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.string("metadata key " + std::to_string(i));
    if (key.empty()) fail(file, ": metadata key ", i, " is empty");
    const GgufValueType t = value_type(r, key);
    GgufValue v = read_value(r, t, key);
    if (!c.metadata.emplace(key, std::move(v)).second) fail(file, ": duplicate metadata key '", key, "'");
  }
  if (auto it = c.metadata.find("general.alignment"); it != c.metadata.end()) {
    const GgufValue& a = it->second;
    if (a.type != GgufValueType::U32 || a.integer == 0 || (a.integer & (a.integer - 1)) != 0)
      fail(file, ": key 'general.alignment' must be a power of two (uint32), not ", a.integer);
    c.alignment = uint32_t(a.integer);
  }
  c.tensors.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t = read_tensor_info(r, file);
    if (!c.tensor_index.emplace(t.name, c.tensors.size()).second) fail(file, ": duplicate tensor '", t.name, "'");
    c.tensors.push_back(std::move(t));
  }
  const size_t data_start = (r.pos() + c.alignment - 1) / c.alignment * c.alignment;
  if (n_tensors > 0 && data_start > size) fail(file, ": truncated file: the tensor data would start at ", data_start, ", past its end (", size, ")");
  std::vector<const GgufTensor*> by_offset;
  for (GgufTensor& t : c.tensors) {
    if (t.offset % c.alignment != 0)
      fail(file, ": tensor '", t.name, "' is misaligned (offset ", t.offset, ", alignment ", c.alignment, ")");
    if (t.offset > size - data_start || t.nbytes > size - data_start - t.offset)
      fail(file, ": tensor '", t.name, "' (", t.nbytes, " bytes at data offset ", t.offset, ") runs past the end of the file (",
           size, " bytes; truncated?)");
    t.data = bytes + data_start + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->nbytes > by_offset[i]->offset)
      fail(file, ": tensors '", by_offset[i - 1]->name, "' and '", by_offset[i]->name, "' overlap");
  return c;
}

GgufFile::GgufFile(const std::string& path) : file_(path) { c_ = parse_gguf(file_.data(), file_.size(), path); }

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = c_.metadata.find(key);
  return it == c_.metadata.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::tensor(const std::string& name) const {
  auto it = c_.tensor_index.find(name);
  return it == c_.tensor_index.end() ? nullptr : &c_.tensors[it->second];
}

const GgufValue& GgufFile::need(const std::string& key, const char* what) const {
  const GgufValue* v = find(key);
  if (!v) fail(path(), ": missing metadata key '", key, "' (", what, ")");
  return *v;
}

std::string GgufFile::str(const std::string& key) const {
  const GgufValue& v = need(key, "a string");
  if (v.type != GgufValueType::STRING) fail(path(), ": key '", key, "' is ", gguf_value_type_name(v.type), ", not a string");
  return v.str;
}

int64_t GgufFile::integer(const std::string& key) const {
  const GgufValue& v = need(key, "an integer");
  if (!v.is_integer()) fail(path(), ": key '", key, "' is ", gguf_value_type_name(v.type), ", not an integer");
  return v.integer;
}

double GgufFile::number(const std::string& key) const {
  const GgufValue& v = need(key, "a number");
  if (!v.is_number()) fail(path(), ": key '", key, "' is ", gguf_value_type_name(v.type), ", not a number");
  return v.number;
}

const std::vector<std::string>& GgufFile::strings(const std::string& key) const {
  const GgufValue& v = need(key, "an array of strings");
  if (v.type != GgufValueType::ARRAY || v.elem != GgufValueType::STRING)
    fail(path(), ": key '", key, "' is not an array of strings");
  return v.strings;
}

const std::vector<int64_t>& GgufFile::integers(const std::string& key) const {
  const GgufValue& v = need(key, "an array of integers");
  if (v.type != GgufValueType::ARRAY || v.elem == GgufValueType::STRING || v.elem == GgufValueType::F32 ||
      v.elem == GgufValueType::F64)
    fail(path(), ": key '", key, "' is not an array of integers");
  return v.integers;
}

std::string GgufFile::arch_key(const std::string& suffix) const { return str("general.architecture") + "." + suffix; }

std::optional<std::string> find_gguf(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) return path;
  if (!fs::is_directory(path, ec) || fs::exists(fs::path(path) / "config.json", ec)) return std::nullopt;
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.path().extension() == ".gguf") found.push_back(e.path().string());
  if (found.empty()) return std::nullopt;
  std::sort(found.begin(), found.end());
  if (found.size() > 1) {
    std::string list;
    for (const auto& f : found) list += "\n  " + f;
    fail(path, ": holds ", found.size(), " .gguf files and no config.json; name one:", list);
  }
  return found[0];
}

}  // namespace dspark

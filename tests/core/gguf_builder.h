// GgufBuilder: writes GGUF bytes field by field, so that tests can make valid files and files
// broken in exactly one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dspark::testing {

class GgufBuilder {
 public:
  uint32_t version = 3;
  uint32_t alignment = 32;
  int64_t tensor_count_override = -1;  // >= 0: write this tensor count instead of the real one
  int64_t kv_count_override = -1;

  template <class T>
  static void put(std::string& o, T v) {
    o.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  static void put_str(std::string& o, const std::string& s) {
    put<uint64_t>(o, s.size());
    o += s;
  }

  GgufBuilder& kv_raw(const std::string& key, uint32_t type, const std::string& value) {
    put_str(kv_, key);
    put<uint32_t>(kv_, type);
    kv_ += value;
    ++n_kv_;
    return *this;
  }
  GgufBuilder& kv_u32(const std::string& key, uint32_t v) { return kv_raw(key, 4, bytes(v)); }
  GgufBuilder& kv_i32(const std::string& key, int32_t v) { return kv_raw(key, 5, bytes(v)); }
  GgufBuilder& kv_f32(const std::string& key, float v) { return kv_raw(key, 6, bytes(v)); }
  GgufBuilder& kv_bool(const std::string& key, bool v) { return kv_raw(key, 7, std::string(1, char(v))); }
  GgufBuilder& kv_str(const std::string& key, const std::string& v) {
    std::string s;
    put_str(s, v);
    return kv_raw(key, 8, s);
  }
  GgufBuilder& kv_strs(const std::string& key, const std::vector<std::string>& v) {
    std::string s;
    put<uint32_t>(s, 8);
    put<uint64_t>(s, v.size());
    for (const auto& x : v) put_str(s, x);
    return kv_raw(key, 9, s);
  }
  GgufBuilder& kv_i32s(const std::string& key, const std::vector<int32_t>& v) {
    std::string s;
    put<uint32_t>(s, 5);
    put<uint64_t>(s, v.size());
    for (int32_t x : v) put<int32_t>(s, x);
    return kv_raw(key, 9, s);
  }

  // A tensor with ggml dims `ne` and its data; offset -1: the next aligned offset.
  GgufBuilder& tensor(const std::string& name, uint32_t type, const std::vector<uint64_t>& ne, const std::string& data,
                      int64_t offset = -1) {
    put_str(ti_, name);
    put<uint32_t>(ti_, uint32_t(ne.size()));
    for (uint64_t d : ne) put<uint64_t>(ti_, d);
    put<uint32_t>(ti_, type);
    const uint64_t off = offset >= 0 ? uint64_t(offset) : (data_.size() + alignment - 1) / alignment * alignment;
    put<uint64_t>(ti_, off);
    if (data_.size() < off + data.size()) data_.resize(off + data.size());
    data_.replace(off, data.size(), data);
    ++n_t_;
    return *this;
  }

  std::string build() const {
    std::string o = "GGUF";
    put<uint32_t>(o, version);
    put<uint64_t>(o, tensor_count_override >= 0 ? uint64_t(tensor_count_override) : n_t_);
    put<uint64_t>(o, kv_count_override >= 0 ? uint64_t(kv_count_override) : n_kv_);
    o += kv_;
    o += ti_;
    o.resize((o.size() + alignment - 1) / alignment * alignment);
    return o + data_;
  }

  template <class T>
  static std::string bytes(T v) {
    std::string s;
    put<T>(s, v);
    return s;
  }

 private:
  std::string kv_, ti_, data_;
  uint64_t n_kv_ = 0, n_t_ = 0;
};

}  // namespace dspark::testing

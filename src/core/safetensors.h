// Safetensors: reading (memory-mapped, validated) and writing of the HF tensor file format.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mmap_file.h"

namespace dspark {

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapped file
  size_t nbytes = 0;
  std::string file;  // the file it came from, for error messages

  int64_t numel() const;
  std::string shape_str() const;  // "[3, 4]"
};

// Parses a safetensors header. `bytes` is the whole file; `file` names it in errors.
// Validates the header length, the JSON, every dtype, shape and offset range. A tensor name (or a
// key of an entry) given twice, and tensors whose data ranges overlap, are refused naming them.
std::map<std::string, TensorView> parse_safetensors(const uint8_t* bytes, size_t size,
                                                    const std::string& file,
                                                    std::map<std::string, std::string>* metadata = nullptr);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of an HF model directory: model.safetensors, or the shards listed in
// model.safetensors.index.json.
class TensorStore {
 public:
  static std::unique_ptr<TensorStore> open_dir(const std::string& dir);
  static std::unique_ptr<TensorStore> open_file(const std::string& path);

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws Error naming the tensor and the directory when absent.
  const TensorView& get(const std::string& name) const;
  // Checks dtype is a float type and shape matches exactly; error names tensor, file, both shapes.
  const TensorView& get(const std::string& name, const std::vector<int64_t>& shape) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorView> tensors_;
};

// Writes tensors in safetensors format, in insertion order.
class SafetensorsWriter {
 public:
  void add(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const void* data);
  void add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data,
               DType stored_as);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  void write(const std::string& path) const;  // atomic: writes path.tmp then renames

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace dspark

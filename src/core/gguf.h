// GGUF: reading (memory-mapped, validated) of llama.cpp's model file format, versions 2 and 3.
//
// A file is a header (magic "GGUF", version, tensor and key counts), typed key/value metadata
// (architecture, hyperparameters, tokenizer), tensor descriptors (name, dims, ggml type, offset)
// and, at the next multiple of `general.alignment` (default 32), the tensor data. Everything is
// little-endian. Dims are in ggml order: ne[0] is the innermost (contiguous) one, so an HF matrix
// [rows, cols] is stored with ne = {cols, rows}.
//
// Nothing in a file is trusted: every length and count is checked against the bytes that remain,
// every tensor against its type's block size, the alignment and the end of the file, and the
// error names the file and the key or tensor at fault.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mmap_file.h"

namespace dspark {

// The ggml tensor types (ggml.h numbering). Only those in ggml_type_supported() can be read.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, BF16 = 30,
};

struct GgmlTypeTraits {
  const char* name;     // llama.cpp's spelling: "Q4_K", "BF16", ...
  int block_elems;      // elements per block (1 for float types)
  int block_bytes;      // bytes per block
  bool supported;       // dspark can dequantize it
};
// The traits of type `t`, or nullopt for a number that is no ggml type dspark knows.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t t);
const char* ggml_type_name(GgmlType t);
// Bytes of a row of n elements (n a multiple of the block size).
size_t ggml_row_bytes(GgmlType t, int64_t n);
// Parses "q8_0", "Q4_K", "bf16", ... (either case); nullopt if unknown.
std::optional<GgmlType> ggml_type_from_name(const std::string& name);

enum class GgufValueType : uint32_t { U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  GgufValueType elem = GgufValueType::U8;  // arrays: the element type
  std::string str;                         // STRING
  int64_t integer = 0;                     // integer types and BOOL
  double number = 0;                       // every numeric type and BOOL
  std::vector<std::string> strings;        // array of STRING
  std::vector<int64_t> integers;           // array of an integer type or BOOL
  std::vector<double> numbers;             // array of F32 / F64
  bool is_integer() const;
  bool is_number() const;  // an integer, a float or a bool
};
const char* gguf_value_type_name(GgufValueType t);

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;   // ggml order: ne[0] is contiguous
  uint64_t offset = 0;       // from the start of the data section
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const;
  int64_t rows() const;           // product of ne[1..]
  std::string shape_str() const;  // in HF order (outermost first): "[1024, 4096]"
};

struct GgufContents {
  uint32_t version = 0;
  uint32_t alignment = 32;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensor> tensors;  // in file order
  std::map<std::string, size_t> tensor_index;
};

// Parses and validates a whole GGUF file held in `bytes`; `file` names it in errors.
GgufContents parse_gguf(const uint8_t* bytes, size_t size, const std::string& file);

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // maps and parses; throws Error naming the path
  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return c_.version; }
  const std::map<std::string, GgufValue>& metadata() const { return c_.metadata; }
  const std::vector<GgufTensor>& tensors() const { return c_.tensors; }

  const GgufValue* find(const std::string& key) const;
  const GgufTensor* tensor(const std::string& name) const;
  // Typed reads; each throws Error naming the file and the key when it is absent or of another type.
  std::string str(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;
  const std::vector<std::string>& strings(const std::string& key) const;
  const std::vector<int64_t>& integers(const std::string& key) const;
  // The architecture-prefixed key "<general.architecture>.<suffix>".
  std::string arch_key(const std::string& suffix) const;

 private:
  const GgufValue& need(const std::string& key, const char* what) const;
  MappedFile file_;
  GgufContents c_;
};

// The GGUF file `path` names: the path itself when it ends in ".gguf", the one ".gguf" file of a
// directory that holds no config.json; nullopt otherwise (an HF directory). A directory holding
// several ".gguf" files and no config.json is refused, naming them.
std::optional<std::string> find_gguf(const std::string& path);

}  // namespace dspark

// formats/gguf_file.h: a memory-mapped GGUF v2/v3 reader. Parses the header, every
// metadata value type (nested arrays too) and the tensor infos; checks every offset and
// size against the file before use. Tensor data stays in the map; callers dequantise it
// (formats/ggml_types.h). Torch-free. Format: ggml docs/gguf.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lorakv/formats/ggml_types.h"
#include "lorakv/formats/mapped_file.h"

namespace lorakv::formats {

// Metadata value type codes (docs/gguf.md, gguf_metadata_value_type).
enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* gguf_type_name(GgufType type);

// One metadata value. Scalars use exactly one of the scalar fields (by `type`); arrays
// keep their element type and elements (which may themselves be arrays).
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t u = 0;          // unsigned integer types
  int64_t i = 0;           // signed integer types
  double f = 0;            // float32 / float64
  bool b = false;          // bool
  std::string s;           // string
  GgufType elem_type = GgufType::kUint8;  // arrays only
  std::vector<GgufValue> array;           // arrays only

  bool is_integer() const;
  bool is_float() const { return type == GgufType::kFloat32 || type == GgufType::kFloat64; }
  std::string describe() const;  // "uint32", "array<string>[49152]", ... for error messages
};

// One tensor's info. Dimensions are in ggml order: dims[0] is the contiguous axis, so a
// PyTorch Linear weight [out, in] has dims {in, out}.
struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order (ne)
  uint32_t type_id = 0;       // ggml type id, validated as known
  uint64_t offset = 0;        // relative to the start of the data section
  int64_t num_elements = 0;
  int64_t num_bytes = 0;
  const uint8_t* data = nullptr;  // points into the map; valid while the GgufFile lives

  GgmlType type() const { return static_cast<GgmlType>(type_id); }
  // Dimensions in PyTorch order (reversed ggml order): {out, in} for a Linear weight.
  std::vector<int64_t> torch_shape() const { return {dims.rbegin(), dims.rend()}; }
};

class GgufFile {
 public:
  // Opens and validates `path`. Throws ModelLoadError naming the file, the field, what
  // was expected and what was found: bad magic or version, truncation, unknown value or
  // tensor types, misaligned or out-of-bounds tensor data, duplicate names.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Same checks on a file already in memory; `name` stands for the path in errors.
  static std::unique_ptr<GgufFile> parse_bytes(std::vector<uint8_t> bytes, const std::string& name);

  const std::string& path() const { return map_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return map_.size(); }

  // Metadata in file order of keys (std::map: sorted for printing).
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }

  // Typed getters: throw ModelLoadError (key, expected type, found type) when the key is
  // missing or of another kind. Integers accept any integer type (the spec allows uint32
  // or uint64 for counts); floats accept float32/float64 and integers.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  // Same, but nullopt when the key is absent (still an error when present with a bad type).
  std::optional<std::string> find_string(const std::string& key) const;
  std::optional<int64_t> find_int(const std::string& key) const;
  std::optional<double> find_float(const std::string& key) const;
  std::optional<bool> find_bool(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // Throws ModelLoadError naming the missing tensor.
  const GgufTensorInfo& tensor(const std::string& name) const;

 private:
  explicit GgufFile(const std::string& path);
  GgufFile(const std::string& name, std::vector<uint8_t> bytes);
  void parse();

  MappedFile map_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace lorakv::formats

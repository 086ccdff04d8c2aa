// formats/safetensors_file.h: a memory-mapped safetensors reader (Hugging Face weights
// and PEFT adapters). Layout: an 8-byte little-endian header length N, N bytes of JSON
// header ({"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets"}}), then
// the data buffer. Validated as strictly as the reference implementation: known dtypes,
// sizes that match shapes, offsets inside the buffer, tensors that tile it with no holes
// or overlaps, no duplicate names. Tensor data stays in the map. Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "lorakv/formats/mapped_file.h"

namespace lorakv::formats {

// Every dtype the format defines (safetensors' Dtype). Only F32, F16 and BF16 convert to
// float32; the others open fine and fail only in convert_to_f32.
enum class SafetensorsDtype {
  kBool, kU8, kI8, kF8_E4M3, kF8_E4M3FNUZ, kF8_E5M2, kF8_E5M2FNUZ, kF8_E8M0,
  kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64, kC64,
};
const char* safetensors_dtype_name(SafetensorsDtype dtype);  // "F32", "BF16", ...
int64_t safetensors_dtype_size(SafetensorsDtype dtype);       // bytes per element

struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;  // PyTorch order, row-major; {} is a scalar (one element)
  int64_t num_elements = 0;
  int64_t num_bytes = 0;
  uint64_t data_begin = 0;  // offset of the data within the data buffer
  // Into the map, valid while the file lives. Not necessarily aligned for the dtype:
  // read it with memcpy (convert_to_f32 does).
  const uint8_t* data = nullptr;
  std::string file;  // the file it lives in, for error messages

  const char* dtype_name() const { return safetensors_dtype_name(dtype); }
};

class SafetensorsFile {
 public:
  // Opens and validates `path`; throws ModelLoadError naming the file, the tensor or
  // field, what was expected and what was found.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  // Same checks on a file already in memory; `name` stands for the path in errors.
  static std::unique_ptr<SafetensorsFile> parse_bytes(std::vector<uint8_t> bytes, const std::string& name);

  const std::string& path() const { return map_.path(); }
  uint64_t file_size() const { return map_.size(); }
  uint64_t header_size() const { return header_size_; }  // N, the JSON header's bytes

  // "__metadata__" (string to string; empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Tensors in header order.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* find_tensor(const std::string& name) const;
  // Throws ModelLoadError naming the missing tensor.
  const SafetensorsTensorInfo& tensor(const std::string& name) const;

 private:
  explicit SafetensorsFile(const std::string& path);
  SafetensorsFile(const std::string& name, std::vector<uint8_t> bytes);
  void parse();

  MappedFile map_;
  uint64_t header_size_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// Writes the tensor's num_elements values as float32 to `dst`. F32, F16 and BF16 only;
// any other dtype throws ModelLoadError naming the tensor and its dtype.
void convert_to_f32(const SafetensorsTensorInfo& tensor, float* dst);

}  // namespace lorakv::formats

// formats/safetensors_writer.h: the bytes of a safetensors file (an 8-byte little-endian
// header length, the JSON header with each tensor's dtype, shape and data offsets and an
// optional "__metadata__" of strings, then the tensors' bytes), as SafetensorsFile reads them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lorakv/formats/safetensors_file.h"

namespace lorakv::formats {

struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // shape's product times the dtype's size bytes, row-major
};

// Throws ConfigError for an empty or duplicate name or a name starting "__".
std::vector<uint8_t> safetensors_bytes(const std::vector<SafetensorsEntry>& tensors,
                                       const std::map<std::string, std::string>& metadata);

}  // namespace lorakv::formats

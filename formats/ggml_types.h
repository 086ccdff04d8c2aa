// formats/ggml_types.h: the ggml tensor types lorakv reads from GGUF files, their block
// sizes, and dequantisation to float32. Torch-free: runtime/ wraps the floats in tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace lorakv::formats {

// Type ids as in ggml's docs/gguf.md. Only these are understood; others are rejected
// with their numeric id in the message.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kBF16 = 30,
};

struct GgmlTypeTraits {
  const char* name;        // "F32", "Q4_1", ...
  int64_t block_elements;  // elements per block (1 for plain floats)
  int64_t block_bytes;     // bytes per block
};

// Traits of a known type id, or nullopt for an id lorakv does not implement.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);
std::string ggml_type_name(uint32_t type_id);  // "Q4_1", or "unknown(42)"

// Bytes of `num_elements` elements; num_elements must be a multiple of the block size.
int64_t ggml_nbytes(GgmlType type, int64_t num_elements);

// Dequantises `num_elements` elements (a multiple of the block size) from `src` to `dst`.
void dequantize_to_f32(GgmlType type, const uint8_t* src, float* dst, int64_t num_elements);

// IEEE binary16 / bfloat16 bit patterns to float.
float fp16_to_f32(uint16_t bits);
inline float bf16_to_f32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  static_assert(sizeof f == sizeof u);
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace lorakv::formats

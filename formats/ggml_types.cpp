// formats/ggml_types.cpp: ggml type table and dequantisers. Block layouts follow ggml's
// ggml-common.h; note that 4-bit blocks keep elements 0..15 in the LOW nibbles and
// 16..31 in the HIGH nibbles (adjacent elements are not packed together).
#include "lorakv/formats/ggml_types.h"

#include <cstring>

#include "lorakv/common/errors.h"

namespace lorakv::formats {

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id) {
  switch (static_cast<GgmlType>(type_id)) {
    case GgmlType::kF32: return GgmlTypeTraits{"F32", 1, 4};
    case GgmlType::kF16: return GgmlTypeTraits{"F16", 1, 2};
    case GgmlType::kBF16: return GgmlTypeTraits{"BF16", 1, 2};
    case GgmlType::kQ4_0: return GgmlTypeTraits{"Q4_0", 32, 18};
    case GgmlType::kQ4_1: return GgmlTypeTraits{"Q4_1", 32, 20};
    case GgmlType::kQ8_0: return GgmlTypeTraits{"Q8_0", 32, 34};
  }
  return std::nullopt;
}

std::string ggml_type_name(uint32_t type_id) {
  auto t = ggml_type_traits(type_id);
  return t ? std::string(t->name) : "unknown(" + std::to_string(type_id) + ")";
}

int64_t ggml_nbytes(GgmlType type, int64_t num_elements) {
  auto t = ggml_type_traits(static_cast<uint32_t>(type));
  LORAKV_ASSERT(t.has_value(), "unknown ggml type");
  LORAKV_ASSERT(num_elements % t->block_elements == 0, "element count not a multiple of the block");
  return num_elements / t->block_elements * t->block_bytes;
}

float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;  // signed zero
    } else {      // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void dequantize_q4_0(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 18, dst += 32) {
    const float d = fp16_to_f32(load_u16(src));
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 20, dst += 32) {
    const float d = fp16_to_f32(load_u16(src));
    const float m = fp16_to_f32(load_u16(src + 2));
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
      dst[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q8_0(const uint8_t* src, float* dst, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 34, dst += 32) {
    const float d = fp16_to_f32(load_u16(src));
    const auto* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(qs[j]) * d;
  }
}

}  // namespace

void dequantize_to_f32(GgmlType type, const uint8_t* src, float* dst, int64_t num_elements) {
  auto traits = ggml_type_traits(static_cast<uint32_t>(type));
  LORAKV_ASSERT(traits.has_value(), "unknown ggml type");
  LORAKV_ASSERT(num_elements % traits->block_elements == 0, "partial block");
  const int64_t num_blocks = num_elements / traits->block_elements;
  switch (type) {
    case GgmlType::kF32: std::memcpy(dst, src, static_cast<size_t>(num_elements) * 4); return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < num_elements; ++i) dst[i] = fp16_to_f32(load_u16(src + 2 * i));
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < num_elements; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
      return;
    case GgmlType::kQ4_0: dequantize_q4_0(src, dst, num_blocks); return;
    case GgmlType::kQ4_1: dequantize_q4_1(src, dst, num_blocks); return;
    case GgmlType::kQ8_0: dequantize_q8_0(src, dst, num_blocks); return;
  }
}

}  // namespace lorakv::formats

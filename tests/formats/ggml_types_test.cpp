// tests/formats/ggml_types_test.cpp: dequantisers on hand-built blocks whose values are
// worked out from the block formulas in ggml's docs, including the nibble order trap.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "lorakv/formats/ggml_types.h"

namespace lorakv::formats {
namespace {

void put_u16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(b.data() + at, &v, 2); }

constexpr uint16_t kHalfOne = 0x3c00;    // 1.0
constexpr uint16_t kHalfHalf = 0x3800;   // 0.5
constexpr uint16_t kHalfMinus2 = 0xc000; // -2.0

TEST(GgmlTypes, Fp16AndBf16Bits) {
  EXPECT_EQ(fp16_to_f32(kHalfOne), 1.0f);
  EXPECT_EQ(fp16_to_f32(kHalfMinus2), -2.0f);
  EXPECT_EQ(fp16_to_f32(0x0001), 5.9604644775390625e-8f);  // smallest subnormal, 2^-24
  EXPECT_EQ(fp16_to_f32(0x7bff), 65504.0f);                // largest finite
  EXPECT_TRUE(std::isinf(fp16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(fp16_to_f32(0x7e00)));
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
}

TEST(GgmlTypes, Q4_0LowNibblesAreTheFirstHalf) {
  std::vector<uint8_t> block(18, 0);
  put_u16(block, 0, kHalfHalf);  // d = 0.5
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>((j & 0xf) | ((15 - j) << 4));
  float out[32];
  dequantize_to_f32(GgmlType::kQ4_0, block.data(), out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], (j - 8) * 0.5f) << j;             // element j: low nibble of byte j
    EXPECT_EQ(out[j + 16], (15 - j - 8) * 0.5f) << j;   // element j+16: high nibble of byte j
  }
}

TEST(GgmlTypes, Q4_1AddsTheMinimum) {
  std::vector<uint8_t> block(40, 0);  // two blocks
  put_u16(block, 0, kHalfOne);        // d = 1
  put_u16(block, 2, kHalfMinus2);     // m = -2
  for (int j = 0; j < 16; ++j) block[4 + j] = static_cast<uint8_t>(j | (j << 4));
  put_u16(block, 20, kHalfHalf);      // second block: d = 0.5, m = 1
  put_u16(block, 22, kHalfOne);
  for (int j = 0; j < 16; ++j) block[24 + j] = 0xf0;
  float out[64];
  dequantize_to_f32(GgmlType::kQ4_1, block.data(), out, 64);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], j - 2.0f);
    EXPECT_EQ(out[j + 16], j - 2.0f);
    EXPECT_EQ(out[32 + j], 1.0f);           // low nibble 0 -> m
    EXPECT_EQ(out[48 + j], 15 * 0.5f + 1);  // high nibble 15
  }
}

TEST(GgmlTypes, Q8_0IsSignedTimesScale) {
  std::vector<uint8_t> block(34, 0);
  put_u16(block, 0, kHalfMinus2);
  for (int j = 0; j < 32; ++j) block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  float out[32];
  dequantize_to_f32(GgmlType::kQ8_0, block.data(), out, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], (j - 16) * -2.0f);
}

TEST(GgmlTypes, SizesAndNames) {
  EXPECT_EQ(ggml_nbytes(GgmlType::kQ4_1, 64), 40);
  EXPECT_EQ(ggml_nbytes(GgmlType::kQ8_0, 32), 34);
  EXPECT_EQ(ggml_nbytes(GgmlType::kBF16, 3), 6);
  EXPECT_EQ(ggml_type_name(3), "Q4_1");
  EXPECT_EQ(ggml_type_name(14), "unknown(14)");
  EXPECT_FALSE(ggml_type_traits(14).has_value());
}

}  // namespace
}  // namespace lorakv::formats

// kernels/cpu/quant_gemv.h: y = x · W^T straight from a block-quantised W, for a few rows
// of x (decode), in two arithmetics:
//   float:   each block's codes unpacked to float32 and multiplied with float32 x
//            (quant_gemv_impl.h): exact to float32 rounding, the form the parity suites run.
//   integer: x quantised to int8 once per call (quantize_activations), then integer block
//            dot products, one float scaling per block (quant_dot_impl.h): the dequantised W
//            times the dequantised x, so it differs from the float form by x's 8-bit rounding.
// One implementation per vector path (quant_gemv_<path>.cpp, each built with its own
// instruction-set flags; the fused VNNI forms of the integer kernel in quant_gemv_avxvnni.cpp
// and quant_gemv_avx512vnni.cpp); the caller picks one with common/cpu_features.h.
// Torch-free: plain pointers in, plain pointers out.
#pragma once

#include <cstdint>

#include "lorakv/kernels/quant_view.h"

namespace lorakv::kernels::cpu {

struct QuantGemvArgs {
  QuantMatrixView w;
  const float* x = nullptr;     // float32 [m, ldx]: the first w.cols of each row are read
  int64_t m = 0;                // rows of x
  int64_t ldx = 0;
  float* y = nullptr;           // float32 [m, ldy]: columns [row_begin, row_end) written
  int64_t ldy = 0;
};

// Writes y[i, r] for every x row i and weight rows r in [row_begin, row_end).
using QuantGemvFn = void (*)(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end);

// x rows quantised for the integer dot products, per block of 32 as ggml's Q8_1: a scale
// and the block's sum, so kQ4's min term stays one multiply-add per block.
struct QuantizedActivations {
  const int8_t* codes = nullptr;  // int8 [m, cols]: round(x / d), in -127..127, element order
  const float* scales = nullptr;  // float32 [m, cols / 32]: d = max |x| / 127 of the block (0: all zero)
  const float* sums = nullptr;    // float32 [m, cols / 32]: d · Σ codes, the dequantised block's sum
  int64_t m = 0;
  int64_t cols = 0;  // a multiple of kQuantBlock
};

// Quantises x float32 [m, ldx] (the first `cols` of each row) into codes int8 [m, cols],
// scales and sums float32 [m, cols / 32] (QuantizedActivations). Plain C++, one copy for
// every path, so every integer kernel reads the same codes.
void quantize_activations(const float* x, int64_t m, int64_t ldx, int64_t cols, int8_t* codes, float* scales,
                          float* sums);

struct QuantDotArgs {
  QuantMatrixView w;
  QuantizedActivations x;  // x.cols == w.cols
  float* y = nullptr;      // float32 [x.m, ldy]: columns [row_begin, row_end) written
  int64_t ldy = 0;
};

// y[i, r] = Σ_b d_rb · dx_ib · (Σ_j q_rbj · qx_ibj) + m_rb · sums_ib (the min term for kQ4
// only), the inner sums exact in int32 (|q·qx| <= 128 · 127, 32 terms), the rest float32.
// Writes weight rows [row_begin, row_end) for every x row; the x rows run in tiles of up to
// 8 back to back over each tile of weight rows, so a weight block comes from memory once for
// all x rows (M = 1..16, the decode of several agents in one step).
using QuantDotFn = void (*)(const QuantDotArgs& args, int64_t row_begin, int64_t row_end);

// kQ4 codes of `rows` rows from GGUF's order (16 bytes per block: element j low, j + 16 high)
// to pair order (kernels/quant_view.h), uint8 [rows, blocks_per_row * 16] both.
void q4_codes_to_pair_order(const uint8_t* gguf, int64_t rows, int64_t blocks_per_row, uint8_t* out);

// Dequantises weight rows [row_begin, row_end) to float32 dst [rows, cols] (row r at
// dst + (r - row_begin) * cols). Plain C++ (the compiler vectorises it).
void quant_dequantize_rows(const QuantMatrixView& w, int64_t row_begin, int64_t row_end, float* dst);

// IEEE half bits to float, exact (subnormals, infinities and NaN included). Inline: the
// scalar path calls it once per block.
inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0 && mantissa == 0) {
    bits = sign;
  } else if (exponent == 0) {  // subnormal: normalise the mantissa
    uint32_t shifts = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shifts;
    }
    bits = sign | ((113u - shifts) << 23) | ((mantissa & 0x3ffu) << 13);
  } else if (exponent == 31) {  // infinity or NaN
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  }
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

namespace scalar {  // also the reference of the vector paths: the same integer arithmetic in plain C++
void quant_gemv(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end);
void quant_dot_gemv(const QuantDotArgs& args, int64_t row_begin, int64_t row_end);
}  // namespace scalar
namespace avx2 {  // needs AVX2, FMA, F16C; the dot products as maddubs + madd
void quant_gemv(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end);
void quant_dot_gemv(const QuantDotArgs& args, int64_t row_begin, int64_t row_end);
}  // namespace avx2
namespace avxvnni {  // the avx2 path with AVX-VNNI's vpdpbusd (VEX) for the dot products
void quant_dot_gemv(const QuantDotArgs& args, int64_t row_begin, int64_t row_end);
}
namespace avx512 {  // needs AVX-512 F/BW/VL; the dot products as maddubs + madd on 512 bits
void quant_gemv(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end);
void quant_dot_gemv(const QuantDotArgs& args, int64_t row_begin, int64_t row_end);
}  // namespace avx512
namespace avx512vnni {  // the avx512 path with AVX-512 VNNI's vpdpbusd
void quant_dot_gemv(const QuantDotArgs& args, int64_t row_begin, int64_t row_end);
}

}  // namespace lorakv::kernels::cpu

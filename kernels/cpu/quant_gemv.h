// kernels/cpu/quant_gemv.h: y = x · W^T straight from a block-quantised W, for a few rows
// of x (decode). One implementation per vector path (quant_gemv_<path>.cpp, each built
// with its own instruction-set flags); the caller picks one with common/cpu_features.h.
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

namespace scalar {
void quant_gemv(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end);
}
namespace avx2 {
void quant_gemv(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end);  // needs AVX2, FMA, F16C
}
namespace avx512 {
void quant_gemv(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end);  // needs AVX-512 F/BW/VL
}

}  // namespace lorakv::kernels::cpu

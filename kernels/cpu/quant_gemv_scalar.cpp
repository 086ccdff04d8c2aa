// kernels/cpu/quant_gemv_scalar.cpp: the portable path (one float per "register"), and the
// row dequantiser every path shares. Also the reference the vector paths are tested against.
#include <cstring>

#include "lorakv/kernels/cpu/quant_gemv.h"
#include "lorakv/kernels/cpu/quant_gemv_impl.h"

namespace lorakv::kernels::cpu {

void quant_dequantize_rows(const QuantMatrixView& w, int64_t row_begin, int64_t row_end, float* dst) {
  const int64_t nb = w.blocks_per_row();
  const int64_t code_bytes = w.code_bytes_per_row();
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* codes = w.codes + r * code_bytes;
    float* out = dst + (r - row_begin) * w.cols;
    for (int64_t b = 0; b < nb; ++b) {
      const float d = half_bits_to_float(w.scales[r * nb + b]);
      float* o = out + b * kQuantBlock;
      if (w.format == QuantFormat::kQ4) {
        const float m = half_bits_to_float(w.mins[r * nb + b]);
        const uint8_t* c = codes + b * (kQuantBlock / 2);
        for (int j = 0; j < 16; ++j) {
          o[j] = d * static_cast<float>(c[j] & 0x0f) + m;
          o[j + 16] = d * static_cast<float>(c[j] >> 4) + m;
        }
      } else {
        const auto* c = reinterpret_cast<const int8_t*>(codes + b * kQuantBlock);
        for (int j = 0; j < 32; ++j) o[j] = d * static_cast<float>(c[j]);
      }
    }
  }
}

namespace scalar {
namespace {

struct Vec {
  using R = float;
  static constexpr int kNumRegs = 16;
  static constexpr int kW = 1;
  static R zero() { return 0.0f; }
  static R set1(float x) { return x; }
  static R load(const float* p) { return *p; }
  static R mul(R a, R b) { return a * b; }
  static R fma(R a, R b, R c) { return a * b + c; }
  static float hsum(R a) { return a; }
  static R add_lane0(R a, float x) { return a + x; }
  static float half(uint16_t h) { return half_bits_to_float(h); }
  static R load_half(const uint16_t* p) { return half_bits_to_float(*p); }
  static void unpack_q4(const uint8_t* c, R* q) {
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<float>(c[j] & 0x0f);
      q[j + 16] = static_cast<float>(c[j] >> 4);
    }
  }
  static void unpack_q8(const uint8_t* c, R* q) {
    for (int j = 0; j < 32; ++j) q[j] = static_cast<float>(static_cast<int8_t>(c[j]));
  }
};

}  // namespace

void quant_gemv(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end) {
  QuantGemv<Vec>::run(args, row_begin, row_end);
}

}  // namespace scalar
}  // namespace lorakv::kernels::cpu

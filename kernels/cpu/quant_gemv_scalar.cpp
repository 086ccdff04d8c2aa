// kernels/cpu/quant_gemv_scalar.cpp: the portable path (one float per "register"), and what
// every path shares: the row dequantiser, the activation quantiser and the kQ4 repacking.
// Also the reference the vector paths are tested against: its integer kernel does the same
// integer arithmetic in plain C++.
#include <cmath>
#include <cstring>

#include "lorakv/kernels/cpu/quant_dot_impl.h"
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
      if (w.format == QuantFormat::kQ4 && w.q4_block_is_paired(b)) {
        const float m = half_bits_to_float(w.mins[r * nb + b]);
        const uint8_t* c = codes + (b & ~int64_t{1}) * (kQuantBlock / 2);
        const int shift = (b & 1) ? 4 : 0;
        for (int j = 0; j < 32; ++j) o[j] = d * static_cast<float>((c[j] >> shift) & 0x0f) + m;
      } else if (w.format == QuantFormat::kQ4) {  // the last, unpaired block: GGUF's order
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

void q4_codes_to_pair_order(const uint8_t* gguf, int64_t rows, int64_t blocks_per_row, uint8_t* out) {
  const int64_t row_bytes = blocks_per_row * 16;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* in = gguf + r * row_bytes;
    uint8_t* o = out + r * row_bytes;
    int64_t b = 0;
    for (; b + 1 < blocks_per_row; b += 2) {
      const uint8_t* lo = in + b * 16;  // block b: element j in lo[j % 16] (low nibble below 16)
      const uint8_t* hi = lo + 16;      // block b + 1
      for (int j = 0; j < 32; ++j) {
        const int shift = j < 16 ? 0 : 4;
        o[b * 16 + j] = static_cast<uint8_t>(((lo[j & 15] >> shift) & 0x0f) | (((hi[j & 15] >> shift) & 0x0f) << 4));
      }
    }
    if (b < blocks_per_row) std::memcpy(o + b * 16, in + b * 16, 16);  // unpaired: GGUF's order kept
  }
}

void quantize_activations(const float* x, int64_t m, int64_t ldx, int64_t cols, int8_t* codes, float* scales,
                          float* sums) {
  const int64_t nb = cols / kQuantBlock;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + i * ldx + b * kQuantBlock;
      int8_t* q = codes + i * cols + b * kQuantBlock;
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
      const float d = amax / 127.0f;
      const float inv = amax > 0 ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) {
        // |x · inv| <= 127 up to one rounding: the clamp keeps the codes symmetric.
        const float v = std::nearbyint(xb[j] * inv);
        q[j] = static_cast<int8_t>(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        sum += q[j];
      }
      scales[i * nb + b] = d;
      sums[i * nb + b] = d * static_cast<float>(sum);
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
  static void unpack_q4_paired(const uint8_t* c, int high, R* q) {
    for (int j = 0; j < 32; ++j) q[j] = static_cast<float>((c[j] >> (4 * high)) & 0x0f);
  }
  static void unpack_q8(const uint8_t* c, R* q) {
    for (int j = 0; j < 32; ++j) q[j] = static_cast<float>(static_cast<int8_t>(c[j]));
  }

  // The integer kernel's pairs: each block's codes as small integers.
  struct Q4Pair {
    uint8_t q[2][32];
  };
  struct Q8Pair {
    const int8_t* q;  // [64]
  };
  static Q4Pair q4_pair(const uint8_t* c) {
    Q4Pair p;
    for (int j = 0; j < 32; ++j) {
      p.q[0][j] = c[j] & 0x0f;
      p.q[1][j] = c[j] >> 4;
    }
    return p;
  }
  static Q8Pair q8_pair(const int8_t* c) { return {c}; }
  struct Scales {
    float s[2];
  };
  static Scales pair_scales(const float* two) { return {{two[0], two[1]}}; }
  static Scales scale_product(const Scales& a, const Scales& b) { return {{a.s[0] * b.s[0], a.s[1] * b.s[1]}}; }
  static R dot_pair(const Q4Pair& p, const int8_t* x, const Scales& s, R acc) {
    int32_t sum[2] = {0, 0};
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < 32; ++j) sum[h] += p.q[h][j] * x[32 * h + j];
    }
    return scaled(sum, s, acc);
  }
  static R dot_pair(const Q8Pair& p, const int8_t* x, const Scales& s, R acc) {
    int32_t sum[2] = {0, 0};
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < 32; ++j) sum[h] += p.q[32 * h + j] * x[32 * h + j];
    }
    return scaled(sum, s, acc);
  }
  static R scaled(const int32_t* sum, const Scales& s, R acc) {
    return acc + static_cast<float>(sum[0]) * s.s[0] + static_cast<float>(sum[1]) * s.s[1];
  }
};

}  // namespace

void quant_gemv(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end) {
  QuantGemv<Vec>::run(args, row_begin, row_end);
}

void quant_dot_gemv(const QuantDotArgs& args, int64_t row_begin, int64_t row_end) {
  QuantDotGemv<Vec>::run(args, row_begin, row_end);
}

}  // namespace scalar
}  // namespace lorakv::kernels::cpu

// kernels/cpu/quant_gemv_impl.h: the block loop of the quantised GEMV, written once over a
// vector type V that each path file defines in an anonymous namespace (so every path's
// copy has internal linkage). V provides R, kW (floats per register), zero, set1, load,
// mul, fma, hsum, add_lane0, half (one half value to float), load_half (kW of them), and
// unpack_q4 / unpack_q8 (one 32-element block's codes to 32 / kW registers of floats, in
// element order).
//
// Per weight row and x row: acc = Σ_b d_b · (Σ_j q_bj · x_bj) as a vector, then the kQ4
// min term Σ_b m_b · xsum_b, then one horizontal sum. Up to four x rows share each
// unpacked block, so a block's codes are decoded once per four rows.
#pragma once

#include <cstdint>

#include "kernels/cpu/quant_gemv.h"

namespace lorakv::kernels::cpu {

template <class V>
struct QuantGemv {
  using R = typename V::R;
  static constexpr int kW = V::kW;
  static constexpr int kRegs = static_cast<int>(kQuantBlock) / kW;  // registers per block
  static constexpr int kRowTile = 4;                                  // x rows per pass

  static void run(const QuantGemvArgs& a, int64_t row_begin, int64_t row_end) {
    for (int64_t i = 0; i < a.m; i += kRowTile) {
      switch (a.m - i >= kRowTile ? kRowTile : a.m - i) {
        case 4: rows<4>(a, i, row_begin, row_end); break;
        case 3: rows<3>(a, i, row_begin, row_end); break;
        case 2: rows<2>(a, i, row_begin, row_end); break;
        default: rows<1>(a, i, row_begin, row_end); break;
      }
    }
  }

 private:
  template <int MT>
  static void rows(const QuantGemvArgs& a, int64_t i0, int64_t row_begin, int64_t row_end) {
    const QuantMatrixView& w = a.w;
    const int64_t nb = w.blocks_per_row();
    const int64_t code_bytes = w.code_bytes_per_row();
    const bool q4 = w.format == QuantFormat::kQ4;
    const float* x[MT];
    for (int t = 0; t < MT; ++t) x[t] = a.x + (i0 + t) * a.ldx;
    for (int64_t r = row_begin; r < row_end; ++r) {
      const uint8_t* codes = w.codes + r * code_bytes;
      const uint16_t* scales = w.scales + r * nb;
      R acc[MT];
      for (int t = 0; t < MT; ++t) acc[t] = V::zero();
      for (int64_t b = 0; b < nb; ++b) {
        R q[kRegs];
        if (q4) {
          V::unpack_q4(codes + b * (kQuantBlock / 2), q);
        } else {
          V::unpack_q8(codes + b * kQuantBlock, q);
        }
        const R d = V::set1(V::half(scales[b]));
        for (int t = 0; t < MT; ++t) {
          const float* xb = x[t] + b * kQuantBlock;
          R s = V::mul(q[0], V::load(xb));
          for (int k = 1; k < kRegs; ++k) s = V::fma(q[k], V::load(xb + k * kW), s);
          acc[t] = V::fma(s, d, acc[t]);
        }
      }
      if (q4) add_min_terms<MT>(w.mins + r * nb, a.xsum + i0 * nb, nb, acc);
      for (int t = 0; t < MT; ++t) a.y[(i0 + t) * a.ldy + r] = V::hsum(acc[t]);
    }
  }

  // acc[t] += Σ_b m_b · xsum[t][b] (kQ4's min term), kW blocks at a time.
  template <int MT>
  static void add_min_terms(const uint16_t* mins, const float* xsum, int64_t nb, R* acc) {
    int64_t b = 0;
    for (; b + kW <= nb; b += kW) {
      const R m = V::load_half(mins + b);
      for (int t = 0; t < MT; ++t) acc[t] = V::fma(m, V::load(xsum + t * nb + b), acc[t]);
    }
    if (b == nb) return;
    float tail[MT] = {};
    for (; b < nb; ++b) {
      const float m = V::half(mins[b]);
      for (int t = 0; t < MT; ++t) tail[t] += m * xsum[t * nb + b];
    }
    for (int t = 0; t < MT; ++t) acc[t] = V::add_lane0(acc[t], tail[t]);
  }
};

}  // namespace lorakv::kernels::cpu

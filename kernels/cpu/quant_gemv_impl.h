// kernels/cpu/quant_gemv_impl.h: the block loop of the quantised GEMV, written once over a
// vector type V that each path file defines in an anonymous namespace (so every path's
// copy has internal linkage). V provides R, kW (floats per register), kNumRegs, zero, set1, load,
// mul, fma, hsum, add_lane0, half (one half value to float), load_half (kW of them), and
// unpack_q4 / unpack_q4_paired / unpack_q8 (one 32-element block's codes to 32 / kW
// registers of floats, in element order: kQ4 from GGUF's order for a last unpaired block,
// else from one half of its pair, kernels/quant_view.h).
//
// Per weight row and x row: acc = Σ_b d_b · (Σ_j q_bj · x_bj) as a vector, then the kQ4
// min term Σ_b m_b · xsum_b, then one horizontal sum. Up to four x rows share each
// unpacked block, so a block's codes are decoded once per four rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lorakv/kernels/cpu/quant_gemv.h"

namespace lorakv::kernels::cpu {

// acc[t] += Σ_b m_b · xsum[t · nb + b] for MT x rows (kQ4's min term), kW blocks at a time:
// shared by the float and the integer kernels (xsum: x's block sums, float32 [MT, nb]).
template <class V, int MT>
void add_min_terms(const uint16_t* mins, const float* xsum, int64_t nb, typename V::R* acc) {
  constexpr int kW = V::kW;
  int64_t b = 0;
  for (; b + kW <= nb; b += kW) {
    const typename V::R m = V::load_half(mins + b);
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

template <class V>
struct QuantGemv {
  using R = typename V::R;
  static constexpr int kW = V::kW;
  static constexpr int kRegs = static_cast<int>(kQuantBlock) / kW;  // registers per block
  // x rows per pass: each weight block is unpacked once for all of them (8: the agents of a
  // shared decode step; 4 spent a third of the 8-row time unpacking every block twice).
  static constexpr int kRowTile = 8;
  // Codes are prefetched this far ahead of the block being read (rows are contiguous, so
  // it runs across row ends): the hardware prefetcher alone left batch-1 decode at about
  // half the streaming bandwidth.
  static constexpr int64_t kPrefetchBytes = 1024;

  static void run(const QuantGemvArgs& a, int64_t row_begin, int64_t row_end) {
    const int64_t nb = a.w.blocks_per_row();
    // kQ4's min term needs each x row's block sums: m x cols additions, computed by each
    // thread for itself (cheaper than a separate pass and a barrier).
    thread_local std::vector<float> xsum;
    if (a.w.format == QuantFormat::kQ4) {
      xsum.resize(static_cast<size_t>(a.m * nb));
      for (int64_t i = 0; i < a.m; ++i) {
        for (int64_t b = 0; b < nb; ++b) {
          const float* xb = a.x + i * a.ldx + b * kQuantBlock;
          float s = 0;
          for (int64_t j = 0; j < kQuantBlock; ++j) s += xb[j];
          xsum[static_cast<size_t>(i * nb + b)] = s;
        }
      }
    }
    for (int64_t i = 0; i < a.m; i += kRowTile) {
      switch (a.m - i >= kRowTile ? kRowTile : a.m - i) {
        case 8: rows<8>(a, xsum.data(), i, row_begin, row_end); break;
        case 7: rows<7>(a, xsum.data(), i, row_begin, row_end); break;
        case 6: rows<6>(a, xsum.data(), i, row_begin, row_end); break;
        case 5: rows<5>(a, xsum.data(), i, row_begin, row_end); break;
        case 4: rows<4>(a, xsum.data(), i, row_begin, row_end); break;
        case 3: rows<3>(a, xsum.data(), i, row_begin, row_end); break;
        case 2: rows<2>(a, xsum.data(), i, row_begin, row_end); break;
        default: rows<1>(a, xsum.data(), i, row_begin, row_end); break;
      }
    }
  }

 private:
  // Weight rows per tile: two independent accumulator chains per x row (one FMA chain per
  // register was latency-bound at batch 1), fewer where the registers would not hold them.
  static constexpr int weight_rows_for(int mt) { return 2 * (mt + kRegs) + 2 <= V::kNumRegs ? 2 : 1; }
  // Blocks whose scales are converted to float at once, ahead of their loop.
  static constexpr int64_t kScaleChunk = 32;

  template <int MT>
  static void rows(const QuantGemvArgs& a, const float* xsum, int64_t i0, int64_t row_begin, int64_t row_end) {
    constexpr int kRt = weight_rows_for(MT);
    int64_t r = row_begin;
    for (; r + kRt <= row_end; r += kRt) tile<MT, kRt>(a, xsum, i0, r);
    for (; r < row_end; ++r) tile<MT, 1>(a, xsum, i0, r);
  }

  // y[i0 + t, r0 + rr] for MT x rows and RT weight rows.
  template <int MT, int RT>
  static void tile(const QuantGemvArgs& a, const float* xsum, int64_t i0, int64_t r0) {
    const QuantMatrixView& w = a.w;
    const int64_t nb = w.blocks_per_row();
    const bool q4 = w.format == QuantFormat::kQ4;
    const int64_t block_bytes = q4 ? kQuantBlock / 2 : kQuantBlock;
    const float* x[MT];
    for (int t = 0; t < MT; ++t) x[t] = a.x + (i0 + t) * a.ldx;
    const uint8_t* codes[RT];
    for (int rr = 0; rr < RT; ++rr) codes[rr] = w.codes + (r0 + rr) * nb * block_bytes;
    R acc[RT][MT];
    for (int rr = 0; rr < RT; ++rr) {
      for (int t = 0; t < MT; ++t) acc[rr][t] = V::zero();
    }
    float d[RT][kScaleChunk];
    for (int64_t b0 = 0; b0 < nb; b0 += kScaleChunk) {
      const int64_t n = nb - b0 < kScaleChunk ? nb - b0 : kScaleChunk;
      for (int rr = 0; rr < RT; ++rr) {
        for (int64_t b = 0; b < n; ++b) d[rr][b] = V::half(w.scales[(r0 + rr) * nb + b0 + b]);
      }
      for (int64_t b = b0; b < b0 + n; ++b) {
        for (int rr = 0; rr < RT; ++rr) {
          R q[kRegs];
          __builtin_prefetch(codes[rr] + b * block_bytes + kPrefetchBytes);
          if (q4 && w.q4_block_is_paired(b)) {
            V::unpack_q4_paired(codes[rr] + (b & ~int64_t{1}) * block_bytes, static_cast<int>(b & 1), q);
          } else if (q4) {
            V::unpack_q4(codes[rr] + b * block_bytes, q);
          } else {
            V::unpack_q8(codes[rr] + b * block_bytes, q);
          }
          const R dv = V::set1(d[rr][b - b0]);
          for (int t = 0; t < MT; ++t) {
            const float* xb = x[t] + b * kQuantBlock;
            R s = V::mul(q[0], V::load(xb));
            for (int k = 1; k < kRegs; ++k) s = V::fma(q[k], V::load(xb + k * kW), s);
            acc[rr][t] = V::fma(s, dv, acc[rr][t]);
          }
        }
      }
    }
    for (int rr = 0; rr < RT; ++rr) {
      if (q4) add_min_terms<V, MT>(w.mins + (r0 + rr) * nb, xsum + i0 * nb, nb, acc[rr]);
      for (int t = 0; t < MT; ++t) a.y[(i0 + t) * a.ldy + r0 + rr] = V::hsum(acc[rr][t]);
    }
  }
};

}  // namespace lorakv::kernels::cpu

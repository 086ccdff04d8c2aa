// kernels/cpu/quant_dot_impl.h: the integer form of the quantised GEMV (quant_gemv.h), its
// block loop written once over the vector type V of each path file (anonymous namespace, so
// every path's copy has internal linkage). Beyond the float ops add_min_terms uses, V has:
//   Q4Pair, q4_pair(32 code bytes):  a pair of kQ4 blocks (pair order) read and split once;
//   Q8Pair, q8_pair(64 code bytes):  a pair of kQ8 blocks read once;
//   Scales, pair_scales(two floats): a pair's two scales [s0, s1] laid out as its dot's lanes;
//   scale_product(a, b): lane-wise a · b (the weight's d times the activations' d_x);
//   dot_pair(pair, x codes [64], scales, acc): acc + s0 · Σ_j q0j·x0j + s1 · Σ_j q1j·x1j over
//     the pair's two blocks, each sum exact in int32, converted to float and scaled once.
// A last unpaired block (odd blocks per row) goes through tail_dot here, in every path.
//
// Loop order: tiles of weight rows outermost; over each, the x rows in tiles of up to
// kMaxXTile back to back (the weight tile's blocks are in L1 for the later ones), so each
// weight block comes from memory once for all M rows.
#pragma once

#include <cstdint>

#include "lorakv/kernels/cpu/quant_gemv.h"
#include "lorakv/kernels/cpu/quant_gemv_impl.h"

namespace lorakv::kernels::cpu {

template <class V>
struct QuantDotGemv {
  using R = typename V::R;
  static constexpr int kMaxXTile = 8;
  // Codes prefetched as far ahead as the float kernel's (quant_gemv_impl.h says why).
  static constexpr int64_t kPrefetchBytes = QuantGemv<V>::kPrefetchBytes;
  // Blocks whose weight scales are converted to float at once; even, so no pair straddles.
  static constexpr int64_t kScaleChunk = 32;

  static void run(const QuantDotArgs& a, int64_t row_begin, int64_t row_end) {
    const int64_t first_tile = a.x.m < kMaxXTile ? a.x.m : kMaxXTile;
    if (a.w.format == QuantFormat::kQ8) {
      by_first_tile<true>(a, first_tile, row_begin, row_end);
    } else {
      by_first_tile<false>(a, first_tile, row_begin, row_end);
    }
  }

  // Σ_j q_j · x_j of the last, unpaired block (kQ4 in GGUF's order), in plain int32.
  template <bool kQ8>
  static int32_t tail_dot(const uint8_t* codes, const int8_t* x) {
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) {
      if constexpr (kQ8) {
        s += static_cast<int8_t>(codes[j]) * x[j] + static_cast<int8_t>(codes[j + 16]) * x[j + 16];
      } else {
        s += (codes[j] & 0x0f) * x[j] + (codes[j] >> 4) * x[j + 16];
      }
    }
    return s;
  }

 private:
  // Weight rows per tile: independent accumulator chains, as many as half the registers hold.
  static constexpr int weight_rows_for(int mt) {
    const int fit = V::kNumRegs / 2 / mt;
    return fit >= 4 ? 4 : fit >= 2 ? 2 : 1;
  }

  template <bool kQ8>
  static void by_first_tile(const QuantDotArgs& a, int64_t first_tile, int64_t row_begin, int64_t row_end) {
    switch (first_tile) {
      case 1: weight_tiles<kQ8, weight_rows_for(1)>(a, row_begin, row_end); break;
      case 2: weight_tiles<kQ8, weight_rows_for(2)>(a, row_begin, row_end); break;
      case 3: weight_tiles<kQ8, weight_rows_for(3)>(a, row_begin, row_end); break;
      case 4: weight_tiles<kQ8, weight_rows_for(4)>(a, row_begin, row_end); break;
      default: weight_tiles<kQ8, weight_rows_for(kMaxXTile)>(a, row_begin, row_end); break;
    }
  }

  template <bool kQ8, int RT>
  static void weight_tiles(const QuantDotArgs& a, int64_t row_begin, int64_t row_end) {
    int64_t r = row_begin;
    for (; r + RT <= row_end; r += RT) x_tiles<kQ8, RT>(a, r);
    for (; r < row_end; ++r) x_tiles<kQ8, 1>(a, r);
  }

  template <bool kQ8, int RT>
  static void x_tiles(const QuantDotArgs& a, int64_t r0) {
    for (int64_t i = 0; i < a.x.m; i += kMaxXTile) {
      switch (a.x.m - i >= kMaxXTile ? kMaxXTile : a.x.m - i) {
        case 8: tile<kQ8, 8, RT>(a, i, r0); break;
        case 7: tile<kQ8, 7, RT>(a, i, r0); break;
        case 6: tile<kQ8, 6, RT>(a, i, r0); break;
        case 5: tile<kQ8, 5, RT>(a, i, r0); break;
        case 4: tile<kQ8, 4, RT>(a, i, r0); break;
        case 3: tile<kQ8, 3, RT>(a, i, r0); break;
        case 2: tile<kQ8, 2, RT>(a, i, r0); break;
        default: tile<kQ8, 1, RT>(a, i, r0); break;
      }
    }
  }

  // acc[t] = dot_pair over x rows t of one weight pair, read once; w_scales: the pair's d,
  // x_scales[t]: x row t's d_x for the pair's blocks.
  template <int MT, class Pair>
  static void pair_into(const Pair& p, const int8_t* const* x, int64_t b, const typename V::Scales& w_scales,
                        const typename V::Scales* x_scales, R* acc) {
    for (int t = 0; t < MT; ++t) {
      acc[t] = V::dot_pair(p, x[t] + b * kQuantBlock, V::scale_product(w_scales, x_scales[t]), acc[t]);
    }
  }

  // y[i0 + t, r0 + rr] for MT x rows and RT weight rows.
  template <bool kQ8, int MT, int RT>
  static void tile(const QuantDotArgs& a, int64_t i0, int64_t r0) {
    const QuantMatrixView& w = a.w;
    const int64_t nb = w.blocks_per_row();
    const int64_t block_bytes = kQ8 ? kQuantBlock : kQuantBlock / 2;
    const int8_t* x[MT];
    const float* dx[MT];
    for (int t = 0; t < MT; ++t) {
      x[t] = a.x.codes + (i0 + t) * a.x.cols;
      dx[t] = a.x.scales + (i0 + t) * nb;
    }
    const uint8_t* codes[RT];
    for (int rr = 0; rr < RT; ++rr) codes[rr] = w.codes + (r0 + rr) * w.code_bytes_per_row();
    R acc[RT][MT];
    for (int rr = 0; rr < RT; ++rr) {
      for (int t = 0; t < MT; ++t) acc[rr][t] = V::zero();
    }
    float d[RT][kScaleChunk];  // the weight scales of one chunk of blocks, as float
    const int64_t paired_end = nb & ~int64_t{1};
    for (int64_t b0 = 0; b0 < paired_end; b0 += kScaleChunk) {
      const int64_t n = paired_end - b0 < kScaleChunk ? paired_end - b0 : kScaleChunk;
      for (int rr = 0; rr < RT; ++rr) {
        for (int64_t b = 0; b < n; ++b) d[rr][b] = V::half(w.scales[(r0 + rr) * nb + b0 + b]);
      }
      for (int64_t b = b0; b < b0 + n; b += 2) {
        typename V::Scales x_scales[MT];  // read once per pair for all weight rows
        for (int t = 0; t < MT; ++t) x_scales[t] = V::pair_scales(dx[t] + b);
        for (int rr = 0; rr < RT; ++rr) {
          const uint8_t* c = codes[rr] + b * block_bytes;
          __builtin_prefetch(c + kPrefetchBytes);
          const typename V::Scales w_scales = V::pair_scales(&d[rr][b - b0]);
          if constexpr (kQ8) {
            pair_into<MT>(V::q8_pair(reinterpret_cast<const int8_t*>(c)), x, b, w_scales, x_scales, acc[rr]);
          } else {
            pair_into<MT>(V::q4_pair(c), x, b, w_scales, x_scales, acc[rr]);
          }
        }
      }
    }
    for (int rr = 0; rr < RT; ++rr) {
      if (paired_end < nb) add_tail_block<kQ8, MT>(a, x, dx, r0 + rr, codes[rr] + paired_end * block_bytes, acc[rr]);
      if constexpr (!kQ8) add_min_terms<V, MT>(w.mins + (r0 + rr) * nb, a.x.sums + i0 * nb, nb, acc[rr]);
      for (int t = 0; t < MT; ++t) a.y[(i0 + t) * a.ldy + r0 + rr] = V::hsum(acc[rr][t]);
    }
  }

  // The last, unpaired block of weight row r (odd blocks per row).
  template <bool kQ8, int MT>
  static void add_tail_block(const QuantDotArgs& a, const int8_t* const* x, const float* const* dx, int64_t r,
                             const uint8_t* codes, R* acc) {
    const int64_t nb = a.w.blocks_per_row(), b = nb - 1;
    const float d = V::half(a.w.scales[r * nb + b]);
    for (int t = 0; t < MT; ++t) {
      const float s = static_cast<float>(tail_dot<kQ8>(codes, x[t] + b * kQuantBlock));
      acc[t] = V::add_lane0(acc[t], s * (d * dx[t][b]));
    }
  }
};

}  // namespace lorakv::kernels::cpu

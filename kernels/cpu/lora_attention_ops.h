// kernels/cpu/lora_attention_ops.h: the small loops of the fused attention, written once over
// a vector type V (V::kW floats per register; load/store/set1/fma/max/exp/bf16 loads), which
// each path file defines in an anonymous namespace. Instantiating these templates with an
// internal-linkage type gives internal-linkage code, so the AVX-512 copy can never be picked
// for another path at link time. Only C library calls (memcpy, expf, logf) leave the file.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "lorakv/kernels/cpu/lora_attention_plan.h"

namespace lorakv::kernels::cpu {

template <class V>
struct Ops {
  using R = typename V::R;
  static constexpr int kW = V::kW;

  static float neg_inf() { return -__builtin_inff(); }
  static float fmax(float a, float b) { return a > b ? a : b; }

  static float bf16_to_float(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  // Round to nearest even, as torch does; NaN stays NaN.
  static uint16_t float_to_bf16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
  }

  // dst[0..n) = src[offset..offset+n) as float32, times `mul` (an int8 row's scale). n is a
  // multiple of kW.
  static void load_row(const void* src, ElementType type, int64_t offset, int64_t n, float mul, float* dst) {
    const R m = V::set1(mul);
    if (type == ElementType::kFloat32) {
      const float* s = static_cast<const float*>(src) + offset;
      for (int64_t i = 0; i < n; i += kW) V::store(dst + i, V::mul(V::load(s + i), m));
    } else if (type == ElementType::kInt8) {
      const int8_t* s = static_cast<const int8_t*>(src) + offset;
      for (int64_t i = 0; i < n; i += kW) V::store(dst + i, V::mul(V::load_i8(s + i), m));
    } else {
      const uint16_t* s = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; i += kW) V::store(dst + i, V::mul(V::load_bf16(s + i), m));
    }
  }
  // Same for any n (residual ranks); the rest up to n_pad is zeroed.
  static void load_row_padded(const void* src, ElementType type, int64_t offset, int64_t n, int64_t n_pad,
                              float* dst) {
    int64_t i = 0;
    if (type == ElementType::kFloat32) {
      const float* s = static_cast<const float*>(src) + offset;
      for (; i + kW <= n; i += kW) V::store(dst + i, V::load(s + i));
      for (; i < n; ++i) dst[i] = s[i];
    } else {
      const uint16_t* s = static_cast<const uint16_t*>(src) + offset;
      for (; i + kW <= n; i += kW) V::store(dst + i, V::load_bf16(s + i));
      for (; i < n; ++i) dst[i] = bf16_to_float(s[i]);
    }
    for (; i < n_pad; ++i) dst[i] = 0.f;
  }
  static void store_row(const float* src, int64_t n, float mul, void* dst, ElementType type) {
    if (type == ElementType::kFloat32) {
      float* d = static_cast<float*>(dst);
      const R m = V::set1(mul);
      for (int64_t i = 0; i < n; i += kW) V::store(d + i, V::mul(V::load(src + i), m));
    } else {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i] * mul);
    }
  }

  // acc[0..width) = alpha * acc + sum_{j<n} p[j] * rows(j)[0..width); width a multiple of
  // kW. Blocks of up to 8 registers of acc stay in registers across the n rows.
  template <class Rows>
  static void axpy_rows(float* acc, int64_t width, float alpha, const float* p, const Rows& rows, int64_t n) {
    int64_t d = 0;
    for (; d + 8 * kW <= width; d += 8 * kW) axpy_block<8>(acc + d, d, alpha, p, rows, n);
    switch ((width - d) / kW) {
      case 7: axpy_block<7>(acc + d, d, alpha, p, rows, n); break;
      case 6: axpy_block<6>(acc + d, d, alpha, p, rows, n); break;
      case 5: axpy_block<5>(acc + d, d, alpha, p, rows, n); break;
      case 4: axpy_block<4>(acc + d, d, alpha, p, rows, n); break;
      case 3: axpy_block<3>(acc + d, d, alpha, p, rows, n); break;
      case 2: axpy_block<2>(acc + d, d, alpha, p, rows, n); break;
      case 1: axpy_block<1>(acc + d, d, alpha, p, rows, n); break;
      default: break;
    }
  }
  template <int N, class Rows>
  static void axpy_block(float* acc, int64_t d0, float alpha, const float* p, const Rows& rows, int64_t n) {
    R a[N];
    const R al = V::set1(alpha);
    for (int k = 0; k < N; ++k) a[k] = V::mul(V::load(acc + k * kW), al);
    for (int64_t j = 0; j < n; ++j) {
      const R pj = V::set1(p[j]);
      const float* row = rows(j) + d0;
      for (int k = 0; k < N; ++k) a[k] = V::fma(pj, V::load(row + k * kW), a[k]);
    }
    for (int k = 0; k < N; ++k) V::store(acc + k * kW, a[k]);
  }

  // s[r * kTileKeys + j] = sum_d q[r * dim + d] * kt[d * kTileKeys + j] for r < rows (at most
  // 4) and j < keys rounded up to the register block.
  static void scores(const float* q, int64_t rows, const float* kt, int64_t dim, int64_t keys, float* s) {
    constexpr int kNv = V::kScoreRegs;
    for (int64_t j0 = 0; j0 < keys; j0 += kNv * kW) {
      switch (rows) {
        case 4: score_block<4, kNv>(q, kt, dim, j0, s); break;
        case 3: score_block<3, kNv>(q, kt, dim, j0, s); break;
        case 2: score_block<2, kNv>(q, kt, dim, j0, s); break;
        default: score_block<1, kNv>(q, kt, dim, j0, s); break;
      }
    }
  }
  template <int kRows, int kNv>
  static void score_block(const float* q, const float* kt, int64_t dim, int64_t j0, float* s) {
    R acc[kRows][kNv];
    for (int r = 0; r < kRows; ++r)
      for (int v = 0; v < kNv; ++v) acc[r][v] = V::zero();
    for (int64_t d = 0; d < dim; ++d) {
      R k[kNv];
      for (int v = 0; v < kNv; ++v) k[v] = V::load(kt + d * kTileKeys + j0 + v * kW);
      for (int r = 0; r < kRows; ++r) {
        const R qd = V::set1(q[r * dim + d]);
        for (int v = 0; v < kNv; ++v) acc[r][v] = V::fma(qd, k[v], acc[r][v]);
      }
    }
    for (int r = 0; r < kRows; ++r)
      for (int v = 0; v < kNv; ++v) V::store(s + r * kTileKeys + j0 + v * kW, acc[r][v]);
  }

  // The wide path's scores, query rows in vector lanes (the keys are never transposed):
  //   st[j * st_stride + r] = sum_d keys(j)[d] * qt[d * qt_stride + r]
  // for j < n and r < nv * kW, nv (vectors of rows) 1 to 3.
  template <class Rows>
  static void scores_t(const Rows& keys, int64_t n, int64_t dim, const float* qt, int64_t qt_stride, int64_t nv,
                       float* st, int64_t st_stride) {
    switch (nv) {
      case 1: scores_t_rows<1>(keys, n, dim, qt, qt_stride, st, st_stride); break;
      case 2: scores_t_rows<2>(keys, n, dim, qt, qt_stride, st, st_stride); break;
      default: scores_t_rows<3>(keys, n, dim, qt, qt_stride, st, st_stride); break;
    }
  }
  // Keys per register block: kJ x kV accumulators, kV query loads and a broadcast in registers.
  static constexpr int wide_keys(int vectors) {
    const int keys = (V::kRegs - vectors - 1) / vectors;
    return keys < 8 ? keys : 8;
  }
  template <int kV, class Rows>
  static void scores_t_rows(const Rows& keys, int64_t n, int64_t dim, const float* qt, int64_t qt_stride, float* st,
                            int64_t st_stride) {
    constexpr int kJ = wide_keys(kV);
    int64_t j = 0;
    for (; j + kJ <= n; j += kJ) scores_t_block<kJ, kV>(keys, j, dim, qt, qt_stride, st, st_stride);
    for (; j < n; ++j) scores_t_block<1, kV>(keys, j, dim, qt, qt_stride, st, st_stride);
  }
  template <int kJ, int kV, class Rows>
  static void scores_t_block(const Rows& keys, int64_t j0, int64_t dim, const float* qt, int64_t qt_stride, float* st,
                             int64_t st_stride) {
    R acc[kJ][kV];
    const float* k[kJ];
    for (int j = 0; j < kJ; ++j) {
      k[j] = keys(j0 + j);
      for (int v = 0; v < kV; ++v) acc[j][v] = V::zero();
    }
    for (int64_t d = 0; d < dim; ++d) {
      R q[kV];
      for (int v = 0; v < kV; ++v) q[v] = V::load(qt + d * qt_stride + v * kW);
      for (int j = 0; j < kJ; ++j) {
        const R kd = V::set1(k[j][d]);
        for (int v = 0; v < kV; ++v) acc[j][v] = V::fma(kd, q[v], acc[j][v]);
      }
    }
    for (int j = 0; j < kJ; ++j)
      for (int v = 0; v < kV; ++v) V::store(st + (j0 + j) * st_stride + v * kW, acc[j][v]);
  }

  // The wide path's scores from integers (paths with V::kIntDot): keys as int16 rows (pairs
  // of elements read as one int32), queries as int16 pairs transposed, qt[p * qt_stride + r]
  // holding row r's elements 2p (low half) and 2p + 1; each lane's sum is exact in int32
  // (dim / 2 pairs of at most 2 x 32767 x 128), then times the row's and the key's scales:
  //   st[j * st_stride + r] = k_scale[j] * q_scale[r] * sum_d k(j)[d] * q[r][d]
  template <class Rows>
  static void scores_t_int(const Rows& keys, const float* k_scale, int64_t n, int64_t dim, const int32_t* qt,
                           int64_t qt_stride, const float* q_scale, int64_t nv, float* st, int64_t st_stride) {
    switch (nv) {
      case 1: scores_t_int_rows<1>(keys, k_scale, n, dim, qt, qt_stride, q_scale, st, st_stride); break;
      case 2: scores_t_int_rows<2>(keys, k_scale, n, dim, qt, qt_stride, q_scale, st, st_stride); break;
      default: scores_t_int_rows<3>(keys, k_scale, n, dim, qt, qt_stride, q_scale, st, st_stride); break;
    }
  }
  template <int kV, class Rows>
  static void scores_t_int_rows(const Rows& keys, const float* k_scale, int64_t n, int64_t dim, const int32_t* qt,
                                int64_t qt_stride, const float* q_scale, float* st, int64_t st_stride) {
    constexpr int kJ = wide_keys(kV);
    int64_t j = 0;
    for (; j + kJ <= n; j += kJ) scores_t_int_block<kJ, kV>(keys, k_scale, j, dim, qt, qt_stride, q_scale, st, st_stride);
    for (; j < n; ++j) scores_t_int_block<1, kV>(keys, k_scale, j, dim, qt, qt_stride, q_scale, st, st_stride);
  }
  template <int kJ, int kV, class Rows>
  static void scores_t_int_block(const Rows& keys, const float* k_scale, int64_t j0, int64_t dim, const int32_t* qt,
                                 int64_t qt_stride, const float* q_scale, float* st, int64_t st_stride) {
    using I = typename V::I;
    I acc[kJ][kV];
    const int16_t* k[kJ];
    for (int j = 0; j < kJ; ++j) {
      k[j] = keys(j0 + j);
      for (int v = 0; v < kV; ++v) acc[j][v] = V::izero();
    }
    for (int64_t pair = 0; pair < dim / 2; ++pair) {
      I q[kV];
      for (int v = 0; v < kV; ++v) q[v] = V::iload(qt + pair * qt_stride + v * kW);
      for (int j = 0; j < kJ; ++j) {
        const I kp = V::broadcast_pair(k[j] + 2 * pair);
        for (int v = 0; v < kV; ++v) acc[j][v] = V::idot(acc[j][v], q[v], kp);
      }
    }
    for (int v = 0; v < kV; ++v) {
      const R qs = V::load(q_scale + v * kW);
      for (int j = 0; j < kJ; ++j) {
        V::store(st + (j0 + j) * st_stride + v * kW, V::mul(V::to_float(acc[j][v]), V::mul(qs, V::set1(k_scale[j0 + j]))));
      }
    }
  }

  // kt[d * kTileKeys + j] = rows(j)[d]; columns n..kTileKeys-1 are zero. Whole groups of
  // kW rows go through the path's register transpose (V::transpose, kW x kW) when it has one.
  template <class Rows>
  static void transpose(const Rows& rows, int64_t n, int64_t dim, float* kt) {
    int64_t j0 = 0;
    if constexpr (V::kHasTranspose) {
      const float* r[kW];
      for (; j0 + kW <= n; j0 += kW) {
        for (int i = 0; i < kW; ++i) r[i] = rows(j0 + i);
        for (int64_t d0 = 0; d0 < dim; d0 += kW) V::transpose(r, d0, kt + d0 * kTileKeys + j0, kTileKeys);
      }
    }
    for (int64_t j = j0; j < n; ++j) {
      const float* row = rows(j);
      for (int64_t d = 0; d < dim; ++d) kt[d * kTileKeys + j] = row[d];
    }
    if (n < kTileKeys) {
      for (int64_t d = 0; d < dim; ++d) std::memset(kt + d * kTileKeys + n, 0, sizeof(float) * (kTileKeys - n));
    }
  }

  // Up to 4 rows at once, sharing every load of rows(j): for r < num_rows,
  //   acc[r][0..width) = alpha[r] acc[r] + sum_{j<n} p[r][j] rows(j)[0..width).
  // width a multiple of kW. The register block (kN registers per row, kU sets of
  // accumulators over alternate keys) keeps at most V::kAccRegs accumulators, and enough of
  // them that the FMA latency chain of one accumulator never limits the loop (a single chain
  // over 64 keys ran 4x slower than the FMA units allow).
  // p[r][j * p_stride] is row r's weight of key j (p_stride > 1: probabilities stored
  // transposed, keys major, by the wide path).
  template <class Rows>
  static void axpy_multi(float* const* acc, const float* alpha, const float* const* p, int64_t num_rows,
                         int64_t width, const Rows& rows, int64_t n, int64_t p_stride = 1) {
    switch (num_rows) {
      case 4: axpy_multi_rows<4>(acc, alpha, p, width, rows, n, p_stride); break;
      case 3: axpy_multi_rows<3>(acc, alpha, p, width, rows, n, p_stride); break;
      case 2: axpy_multi_rows<2>(acc, alpha, p, width, rows, n, p_stride); break;
      default: axpy_multi_rows<1>(acc, alpha, p, width, rows, n, p_stride); break;
    }
  }
  template <int kRows, class Rows>
  static void axpy_multi_rows(float* const* acc, const float* alpha, const float* const* p, int64_t width,
                              const Rows& rows, int64_t n, int64_t ps) {
    constexpr int kN = widest_block(kRows);
    int64_t d = 0;
    for (; d + kN * kW <= width; d += kN * kW) axpy_multi_block<kRows, kN, unroll(kRows, kN)>(acc, d, alpha, p, rows, n, ps);
    const int64_t rest = (width - d) / kW;  // < kN, a sum of smaller powers of two
    if constexpr (kN > 4) {
      if (rest & 4) { axpy_multi_block<kRows, 4, unroll(kRows, 4)>(acc, d, alpha, p, rows, n, ps); d += 4 * kW; }
    }
    if constexpr (kN > 2) {
      if (rest & 2) { axpy_multi_block<kRows, 2, unroll(kRows, 2)>(acc, d, alpha, p, rows, n, ps); d += 2 * kW; }
    }
    if constexpr (kN > 1) {
      if (rest & 1) axpy_multi_block<kRows, 1, unroll(kRows, 1)>(acc, d, alpha, p, rows, n, ps);
    }
  }
  // Registers per row: the largest power of two up to 8 with kRows * kN <= kAccRegs.
  static constexpr int widest_block(int rows) {
    int n = 8;
    while (n > 1 && rows * n > V::kAccRegs) n /= 2;
    return n;
  }
  // Accumulator sets over alternate keys: up to 4 while they fit.
  static constexpr int unroll(int rows, int regs) {
    int u = 4;
    while (u > 1 && rows * regs * u > V::kAccRegs) u /= 2;
    return u;
  }
  template <int kRows, int kN, int kU, class Rows>
  static void axpy_multi_block(float* const* acc, int64_t d0, const float* alpha, const float* const* p,
                               const Rows& rows, int64_t n, int64_t ps) {
    R a[kU][kRows][kN];
    for (int r = 0; r < kRows; ++r) {
      const R al = V::set1(alpha[r]);
      for (int k = 0; k < kN; ++k) a[0][r][k] = V::mul(V::load(acc[r] + d0 + k * kW), al);
    }
    for (int u = 1; u < kU; ++u)
      for (int r = 0; r < kRows; ++r)
        for (int k = 0; k < kN; ++k) a[u][r][k] = V::zero();
    int64_t j = 0;
    for (; j + kU <= n; j += kU) {
      for (int u = 0; u < kU; ++u) {
        const float* row = rows(j + u) + d0;
        R x[kN];
        for (int k = 0; k < kN; ++k) x[k] = V::load(row + k * kW);
        for (int r = 0; r < kRows; ++r) {
          const R pj = V::set1(p[r][(j + u) * ps]);
          for (int k = 0; k < kN; ++k) a[u][r][k] = V::fma(pj, x[k], a[u][r][k]);
        }
      }
    }
    for (; j < n; ++j) {
      const float* row = rows(j) + d0;
      for (int r = 0; r < kRows; ++r) {
        const R pj = V::set1(p[r][j * ps]);
        for (int k = 0; k < kN; ++k) a[0][r][k] = V::fma(pj, V::load(row + k * kW), a[0][r][k]);
      }
    }
    for (int u = 1; u < kU; ++u)
      for (int r = 0; r < kRows; ++r)
        for (int k = 0; k < kN; ++k) a[0][r][k] = V::add(a[0][r][k], a[u][r][k]);
    for (int r = 0; r < kRows; ++r)
      for (int k = 0; k < kN; ++k) V::store(acc[r] + d0 + k * kW, a[0][r][k]);
  }

  // x[j][0..dim) = sum_i c[j * c_stride + i] * b(i)[0..dim) for j < n, four rows per pass
  // over b (the K-LoRA expansion C_k B_k of a tile: each B row loaded once per four keys).
  template <class Rows>
  static void expand(float* x, int64_t n, int64_t dim, const float* c, int64_t c_stride, const Rows& b, int64_t rank) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      for (int64_t d = 0; d < dim; d += V::kExpandRegs * kW) expand_block<4>(x + j * dim, dim, d, c + j * c_stride, c_stride, b, rank);
    }
    for (; j < n; ++j) {
      for (int64_t d = 0; d < dim; d += V::kExpandRegs * kW) expand_block<1>(x + j * dim, dim, d, c + j * c_stride, c_stride, b, rank);
    }
  }
  template <int K, class Rows>
  static void expand_block(float* x, int64_t dim, int64_t d0, const float* c, int64_t c_stride, const Rows& b,
                           int64_t rank) {
    constexpr int kN = V::kExpandRegs;  // dim is a multiple of 32, so of kN * kW
    R a[K][kN];
    for (int k = 0; k < K; ++k)
      for (int v = 0; v < kN; ++v) a[k][v] = V::zero();
    for (int64_t i = 0; i < rank; ++i) {
      const float* row = b(i) + d0;
      R bv[kN];
      for (int v = 0; v < kN; ++v) bv[v] = V::load(row + v * kW);
      for (int k = 0; k < K; ++k) {
        const R ck = V::set1(c[k * c_stride + i]);
        for (int v = 0; v < kN; ++v) a[k][v] = V::fma(ck, bv[v], a[k][v]);
      }
    }
    for (int k = 0; k < K; ++k)
      for (int v = 0; v < kN; ++v) V::store(x + k * dim + d0 + v * kW, a[k][v]);
  }

  // RoPE, rotate_half layout, in place: x[d], x[d + half] by the angle of (pos, d).
  static void rotate(float* x, int64_t dim, const float* cos_row, const float* sin_row) {
    const int64_t half = dim / 2;
    for (int64_t d = 0; d < half; d += kW) {
      const R x1 = V::load(x + d), x2 = V::load(x + half + d);
      const R c = V::load(cos_row + d), s = V::load(sin_row + d);
      V::store(x + d, V::sub(V::mul(x1, c), V::mul(x2, s)));
      V::store(x + half + d, V::fma(x1, s, V::mul(x2, c)));
    }
  }
  // x = H x for one row of n values (n a power of two), H the orthonormal Walsh-Hadamard
  // matrix: log2(n) butterfly stages, then 1/sqrt(n). Used once per query row and per
  // accumulator, so plain loops serve.
  static void hadamard_row(float* x, int64_t n) {
    for (int64_t h = 1; h < n; h *= 2) {
      for (int64_t i = 0; i < n; i += 2 * h) {
        for (int64_t j = i; j < i + h; ++j) {
          const float a = x[j], b = x[j + h];
          x[j] = a + b;
          x[j + h] = a - b;
        }
      }
    }
    const float norm = 1.f / sqrtf(static_cast<float>(n));
    for (int64_t i = 0; i < n; ++i) x[i] *= norm;
  }
  // The same for every key of a transposed tile kt [dim][kTileKeys]: each butterfly combines
  // two rows of keys_pad values (a multiple of kW), so every stage is vector code.
  static void hadamard_columns(float* kt, int64_t dim, int64_t keys_pad) {
    for (int64_t h = 1; h < dim; h *= 2) {
      for (int64_t i = 0; i < dim; i += 2 * h) {
        for (int64_t d = i; d < i + h; ++d) {
          float* a = kt + d * kTileKeys;
          float* b = kt + (d + h) * kTileKeys;
          for (int64_t j = 0; j < keys_pad; j += kW) {
            const R x = V::load(a + j), y = V::load(b + j);
            V::store(a + j, V::add(x, y));
            V::store(b + j, V::sub(x, y));
          }
        }
      }
    }
    const R norm = V::set1(1.f / sqrtf(static_cast<float>(dim)));
    for (int64_t d = 0; d < dim; ++d) {
      for (int64_t j = 0; j < keys_pad; j += kW) V::store(kt + d * kTileKeys + j, V::mul(V::load(kt + d * kTileKeys + j), norm));
    }
  }
  static void add_into(float* x, const float* y, int64_t n) {
    for (int64_t i = 0; i < n; i += kW) V::store(x + i, V::add(V::load(x + i), V::load(y + i)));
  }

  static float row_max(const float* s, int64_t n) {  // n a multiple of kW
    R m = V::set1(neg_inf());
    for (int64_t j = 0; j < n; j += kW) m = V::max(m, V::load(s + j));
    return V::hmax(m);
  }
  // s[j] = exp(s[j] - shift) (0 for -inf), returns the sum. n a multiple of kW.
  static float exp_shift_sum(float* s, int64_t n, float shift) {
    const R sh = V::set1(shift);
    R sum = V::zero();
    for (int64_t j = 0; j < n; j += kW) {
      const R e = V::exp(V::sub(V::load(s + j), sh));
      V::store(s + j, e);
      sum = V::add(sum, e);
    }
    return V::hsum(sum);
  }
};

}  // namespace lorakv::kernels::cpu

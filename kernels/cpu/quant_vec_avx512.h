// kernels/cpu/quant_vec_avx512.h: the 512-bit vector type of the quantised GEMV's float and
// integer kernels (quant_gemv_impl.h, quant_dot_impl.h), included only by the files built
// with AVX-512 flags: quant_gemv_avx512.cpp (dot products as maddubs + madd, AVX-512BW) and
// quant_gemv_avx512vnni.cpp (built with -mavx512vnni too: the fused vpdpbusd). The anonymous
// namespace gives each of them its own copy, compiled with its own flags.
#pragma once

#if !(defined(__AVX512F__) && defined(__AVX512BW__))
#error "quant_vec_avx512.h needs AVX-512 F and BW flags"
#endif
#include <cstdint>

#include "lorakv/kernels/cpu/avx512_intrinsics.h"

namespace lorakv::kernels::cpu::x86 {
namespace {

struct Avx512Vec {
  using R = __m512;
  static constexpr int kNumRegs = 32;
  static constexpr int kW = 16;
  static R zero() { return _mm512_setzero_ps(); }
  static R set1(float x) { return _mm512_set1_ps(x); }
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(R a) { return _mm512_reduce_add_ps(a); }
  static R add_lane0(R a, float x) { return _mm512_mask_add_ps(a, 1, a, _mm512_set1_ps(x)); }
  static float half(uint16_t h) { return _cvtsh_ss(h); }
  static R load_half(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // Byte j holds element j (low nibble) and element 16 + j (high nibble).
  static void unpack_q4(const uint8_t* c, R* q) {
    const __m512i wide = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
    q[0] = _mm512_cvtepi32_ps(_mm512_and_si512(wide, _mm512_set1_epi32(0x0f)));
    q[1] = _mm512_cvtepi32_ps(_mm512_srli_epi32(wide, 4));
  }
  // Byte j of the pair's 32 holds element j in the nibble `high` selects.
  static void unpack_q4_paired(const uint8_t* c, int high, R* q) {
    const __m128i shift = _mm_cvtsi32_si128(4 * high);
    for (int k = 0; k < 2; ++k) {
      const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 16 * k)));
      q[k] = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srl_epi32(v, shift), _mm512_set1_epi32(0x0f)));
    }
  }
  static void unpack_q8(const uint8_t* c, R* q) {
    q[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c))));
    q[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 16))));
  }

  // The integer kernel: one register holds a pair of blocks (bytes 0-31 the first, 32-63
  // the second, each in element order), so lanes 0-7 of a dot are the first block's sums and
  // lanes 8-15 the second's. u: the unsigned operand (kQ4's codes, or |kQ8's codes|); for
  // kQ8, x is negated where w < 0 so that u · x' = w · x. No saturation in maddubs: two
  // products of at most 128 · 127.
  struct Q4Pair {
    __m512i u;
  };
  struct Q8Pair {
    __m512i u;
    __mmask64 negative;
  };
  static Q4Pair q4_pair(const uint8_t* c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
    const __m256i mask = _mm256_set1_epi8(0x0f);
    const __m256i first = _mm256_and_si256(v, mask), second = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
    return {_mm512_inserti64x4(_mm512_castsi256_si512(first), second, 1)};
  }
  static Q8Pair q8_pair(const int8_t* c) {
    const __m512i w = _mm512_loadu_si512(c);
    return {_mm512_abs_epi8(w), _mm512_movepi8_mask(w)};
  }
  // A pair's scales as its dot's lanes: s0 in lanes 0-7, s1 in lanes 8-15.
  using Scales = __m512;
  static Scales pair_scales(const float* two) {
    const __m128 both = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(two)));  // [s0, s1, 0, 0]
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(both));
  }
  static Scales scale_product(Scales a, Scales b) { return _mm512_mul_ps(a, b); }
  static R dot_pair(const Q4Pair& p, const int8_t* x, Scales s, R acc) {
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot(p.u, _mm512_loadu_si512(x))), s, acc);
  }
  static R dot_pair(const Q8Pair& p, const int8_t* x, Scales s, R acc) {
    const __m512i xv = _mm512_loadu_si512(x);
    const __m512i signed_x = _mm512_mask_sub_epi8(xv, p.negative, _mm512_setzero_si512(), xv);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot(p.u, signed_x)), s, acc);
  }
  // Sixteen int32 lanes, each the sum of four u8 · s8 products.
  static __m512i dot(__m512i u, __m512i s) {
#if defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
#else
    return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
#endif
  }
};

}  // namespace
}  // namespace lorakv::kernels::cpu::x86

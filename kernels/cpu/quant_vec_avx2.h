// kernels/cpu/quant_vec_avx2.h: the 256-bit vector type of the quantised GEMV's float and
// integer kernels (quant_gemv_impl.h, quant_dot_impl.h), included only by the files built
// with AVX2 flags: quant_gemv_avx2.cpp (dot products as maddubs + madd) and
// quant_gemv_avxvnni.cpp (built with -mavxvnni too: the fused vpdpbusd). The anonymous
// namespace gives each of them its own copy, compiled with its own flags.
#pragma once

#if !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#error "quant_vec_avx2.h needs AVX2, FMA and F16C flags"
#endif
#include <immintrin.h>

#include <cstdint>

namespace lorakv::kernels::cpu::x86 {
namespace {

struct Avx2Vec {
  using R = __m256;
  static constexpr int kNumRegs = 16;
  static constexpr int kW = 8;
  static R zero() { return _mm256_setzero_ps(); }
  static R set1(float x) { return _mm256_set1_ps(x); }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static float hsum(R a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static R add_lane0(R a, float x) { return _mm256_add_ps(a, _mm256_castps128_ps256(_mm_set_ss(x))); }
  static float half(uint16_t h) { return _cvtsh_ss(h); }
  static R load_half(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // Bytes 0-7 hold elements 0-7 (low nibbles) and 16-23 (high); bytes 8-15: 8-15 and 24-31.
  static void unpack_q4(const uint8_t* c, R* q) {
    const __m256i mask = _mm256_set1_epi32(0x0f);
    const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)));
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + 8)));
    q[0] = _mm256_cvtepi32_ps(_mm256_and_si256(a, mask));
    q[1] = _mm256_cvtepi32_ps(_mm256_and_si256(b, mask));
    q[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(a, 4));
    q[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
  }
  // Byte j of the pair's 32 holds element j in the nibble `high` selects.
  static void unpack_q4_paired(const uint8_t* c, int high, R* q) {
    const __m256i mask = _mm256_set1_epi32(0x0f);
    const __m128i shift = _mm_cvtsi32_si128(4 * high);
    for (int k = 0; k < 4; ++k) {
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + 8 * k)));
      q[k] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(v, shift), mask));
    }
  }
  static void unpack_q8(const uint8_t* c, R* q) {
    for (int k = 0; k < 4; ++k) {
      q[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + 8 * k))));
    }
  }

  // The integer kernel. u: the dot product's unsigned operand per block (kQ4's codes, or
  // |kQ8's codes|); w: kQ8's codes, whose signs move onto x (sign_epi8) so that
  // u · sign(x, w) = w · x. No saturation: maddubs adds two products of at most 128 · 127.
  struct Q4Pair {
    __m256i u[2];
  };
  struct Q8Pair {
    __m256i u[2];
    __m256i w[2];
  };
  static Q4Pair q4_pair(const uint8_t* c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
    const __m256i mask = _mm256_set1_epi8(0x0f);
    return {{_mm256_and_si256(v, mask), _mm256_and_si256(_mm256_srli_epi16(v, 4), mask)}};
  }
  static Q8Pair q8_pair(const int8_t* c) {
    Q8Pair p;
    for (int h = 0; h < 2; ++h) {
      p.w[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32 * h));
      p.u[h] = _mm256_abs_epi8(p.w[h]);
    }
    return p;
  }
  // A pair's scales: one register per block, all lanes alike.
  struct Scales {
    __m256 s[2];
  };
  static Scales pair_scales(const float* two) { return {{_mm256_broadcast_ss(two), _mm256_broadcast_ss(two + 1)}}; }
  static Scales scale_product(const Scales& a, const Scales& b) {
    return {{_mm256_mul_ps(a.s[0], b.s[0]), _mm256_mul_ps(a.s[1], b.s[1])}};
  }
  static R dot_pair(const Q4Pair& p, const int8_t* x, const Scales& s, R acc) {
    acc = scaled(dot(p.u[0], load_codes(x)), s.s[0], acc);
    return scaled(dot(p.u[1], load_codes(x + 32)), s.s[1], acc);
  }
  static R dot_pair(const Q8Pair& p, const int8_t* x, const Scales& s, R acc) {
    acc = scaled(dot(p.u[0], _mm256_sign_epi8(load_codes(x), p.w[0])), s.s[0], acc);
    return scaled(dot(p.u[1], _mm256_sign_epi8(load_codes(x + 32), p.w[1])), s.s[1], acc);
  }
  static __m256i load_codes(const int8_t* x) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)); }
  // Eight int32 lanes, each the sum of four u8 · s8 products.
  static __m256i dot(__m256i u, __m256i s) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
  }
  static R scaled(__m256i sums, R s, R acc) { return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), s, acc); }
};

}  // namespace
}  // namespace lorakv::kernels::cpu::x86

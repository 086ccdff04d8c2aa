// kernels/cpu/lora_attention_vec_avx512.h: the AVX-512 vector type of the fused attention
// (16 floats per register), included only by the files built with its flags:
// lora_attention_avx512.cpp (float32 products throughout) and lora_attention_avx512vnni.cpp
// (the same, with the int8 base's QK products as int16 dot products, vpdpwssd). The
// anonymous namespace gives each of them its own copy, compiled with its own flags.
#pragma once

#if !(defined(__AVX512F__))
#error "lora_attention_vec_avx512.h needs the AVX-512 flags"
#endif
#include "lorakv/kernels/cpu/avx512_intrinsics.h"
#include <math.h>

#include <cstdint>

namespace lorakv::kernels::cpu::x86 {
namespace {

struct AttentionAvx512Vec {
  using R = __m512;
  static constexpr int kW = 16;
  static constexpr int kScoreRegs = 4;   // 64 keys x 4 rows: 16 accumulators of 32 registers
  static constexpr int kAccRegs = 16;    // P.V and P.C accumulators of 32 registers
  static constexpr int kExpandRegs = 2;  // K-LoRA expansion of four keys: 8 accumulators (32 dims)
  static constexpr bool kHasTranspose = true;
  static constexpr int kRegs = 32;
  static constexpr bool kIntDot = false;  // the integer QK form adds it (lora_attention_avx512vnni.cpp)
  // dst[i * dst_stride + j] = rows[j][d0 + i] for a 16 x 16 block.
  static void transpose(const float* const* rows, int64_t d0, float* dst, int64_t dst_stride) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(rows[i] + d0);
    for (int i = 0; i < 8; ++i) {  // 2 x 2 blocks of floats
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {  // 4 x 4 blocks within each 128-bit lane
      const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
      const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
      r[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
      r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int i = 0; i < 4; ++i) {  // 128-bit lanes of row groups 0-3 with 4-7, 8-11 with 12-15
      t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
      t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
      t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
      t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; ++i) {
      _mm512_storeu_ps(dst + i * dst_stride, _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88));
      _mm512_storeu_ps(dst + (i + 8) * dst_stride, _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd));
    }
  }
  static R zero() { return _mm512_setzero_ps(); }
  static R set1(float x) { return _mm512_set1_ps(x); }
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, R x) { _mm512_storeu_ps(p, x); }
  static R load_bf16(const uint16_t* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static R load_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R max(R a, R b) { return _mm512_max_ps(a, b); }
  // x where a >= b, else -inf (the wide path's causal mask).
  static R keep_if_ge(R x, R a, R b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GE_OQ), _mm512_set1_ps(-__builtin_inff()), x);
  }
  static float hmax(R a) { return _mm512_reduce_max_ps(a); }
  static float hsum(R a) { return _mm512_reduce_add_ps(a); }
  // Cephes expf: 2^n * p(r), r = x - n ln2; exactly 0 below -87 (and for -inf).
  static R exp(R x) {
    const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.3762626647949f));
    R fx = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
    R y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.f)));
    const __m512i n = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(fx), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(static_cast<__mmask16>(~tiny), y, _mm512_castsi512_ps(n));
  }
};

}  // namespace
}  // namespace lorakv::kernels::cpu::x86

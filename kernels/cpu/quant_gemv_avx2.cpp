// kernels/cpu/quant_gemv_avx2.cpp: the AVX2 path (8 floats per register). Built with
// -mavx2 -mfma -mf16c for this file only (kernels/CMakeLists.txt); run only where
// common/cpu_features.h finds AVX2 and FMA (every such CPU has F16C).
#include "lorakv/kernels/cpu/quant_gemv.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "lorakv/kernels/cpu/quant_gemv_impl.h"

namespace lorakv::kernels::cpu::avx2 {
namespace {

struct Vec {
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
  static void unpack_q8(const uint8_t* c, R* q) {
    for (int k = 0; k < 4; ++k) {
      q[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + 8 * k))));
    }
  }
};

}  // namespace

void quant_gemv(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end) {
  QuantGemv<Vec>::run(args, row_begin, row_end);
}

}  // namespace lorakv::kernels::cpu::avx2

#else  // not an x86 build with AVX2 flags: never selected (common/cpu_features.h)
#include <cstdlib>
namespace lorakv::kernels::cpu::avx2 {
void quant_gemv(const QuantGemvArgs&, int64_t, int64_t) { std::abort(); }
}  // namespace lorakv::kernels::cpu::avx2
#endif

// kernels/cpu/quant_gemv_avx512.cpp: the AVX-512 path (16 floats per register). Built with
// -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c for this file only
// (kernels/CMakeLists.txt); run only where common/cpu_features.h finds AVX-512.
#include "lorakv/kernels/cpu/quant_gemv.h"

#if defined(__AVX512F__)
#include "lorakv/kernels/cpu/avx512_intrinsics.h"

#include "lorakv/kernels/cpu/quant_gemv_impl.h"

namespace lorakv::kernels::cpu::avx512 {
namespace {

struct Vec {
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
  static void unpack_q8(const uint8_t* c, R* q) {
    q[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c))));
    q[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 16))));
  }
};

}  // namespace

void quant_gemv(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end) {
  QuantGemv<Vec>::run(args, row_begin, row_end);
}

}  // namespace lorakv::kernels::cpu::avx512

#else  // not an x86 build with AVX-512 flags: never selected (common/cpu_features.h)
#include <cstdlib>
namespace lorakv::kernels::cpu::avx512 {
void quant_gemv(const QuantGemvArgs&, int64_t, int64_t) { std::abort(); }
}  // namespace lorakv::kernels::cpu::avx512
#endif

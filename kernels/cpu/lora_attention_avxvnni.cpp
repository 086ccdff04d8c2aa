// kernels/cpu/lora_attention_avxvnni.cpp: the avx2 path's form with AVX-VNNI's int16 dot
// product (vpdpwssd) for the int8 base's QK products (lora_attention_impl.h, IntKeys): two
// products of int16 query and key elements summed into each int32 lane. Built with the
// avx2 flags and -mavxvnni (kernels/CMakeLists.txt); run only where
// features::has_vnni(features, path) holds and the call does not ask for the float form.
#include "lorakv/kernels/cpu/lora_attention_plan.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__AVXVNNI__)
#include <cstdint>
#include <cstring>

#include "lorakv/kernels/cpu/lora_attention_impl.h"
#include "lorakv/kernels/cpu/lora_attention_vec_avx2.h"

namespace lorakv::kernels::cpu::avxvnni {
namespace {

struct Vec : x86::AttentionAvx2Vec {
  static constexpr bool kIntDot = true;
  using I = __m256i;
  static I izero() { return _mm256_setzero_si256(); }
  static I iload(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  // The pair of int16 at p (elements 2i, 2i + 1 of a row) in every int32 lane.
  static I broadcast_pair(const int16_t* p) {
    int32_t pair;
    std::memcpy(&pair, p, sizeof(pair));
    return _mm256_set1_epi32(pair);
  }
  // acc + a.lo * b.lo + a.hi * b.hi per int32 lane (the int16 halves).
  static I idot(I acc, I a, I b) { return _mm256_dpwssd_avx_epi32(acc, a, b); }
  static R to_float(I x) { return _mm256_cvtepi32_ps(x); }
};

}  // namespace

const PathKernels kKernels = FusedAttention<Vec>::kernels();

}  // namespace lorakv::kernels::cpu::avxvnni

#else  // not an x86 build with AVX-VNNI flags: never selected (common/cpu_features.h)

namespace lorakv::kernels::cpu::avxvnni {
const PathKernels kKernels = {nullptr, nullptr, nullptr};
}

#endif

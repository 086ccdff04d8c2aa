// kernels/cpu/lora_attention_avx512vnni.cpp: the avx512 path's form with AVX-512 VNNI's int16 dot
// product (vpdpwssd) for the int8 base's QK products (lora_attention_impl.h, IntKeys): two
// products of int16 query and key elements summed into each int32 lane. Built with the
// avx512 flags and -mavx512vnni (kernels/CMakeLists.txt); run only where
// features::has_vnni(features, path) holds and the call does not ask for the float form.
#include "lorakv/kernels/cpu/lora_attention_plan.h"

#if defined(__AVX512F__) && defined(__AVX512VNNI__)
#include <cstdint>
#include <cstring>

#include "lorakv/kernels/cpu/lora_attention_impl.h"
#include "lorakv/kernels/cpu/lora_attention_vec_avx512.h"

namespace lorakv::kernels::cpu::avx512vnni {
namespace {

struct Vec : x86::AttentionAvx512Vec {
  static constexpr bool kIntDot = true;
  using I = __m512i;
  static I izero() { return _mm512_setzero_si512(); }
  static I iload(const int32_t* p) { return _mm512_loadu_si512(p); }
  // The pair of int16 at p (elements 2i, 2i + 1 of a row) in every int32 lane.
  static I broadcast_pair(const int16_t* p) {
    int32_t pair;
    std::memcpy(&pair, p, sizeof(pair));
    return _mm512_set1_epi32(pair);
  }
  // acc + a.lo * b.lo + a.hi * b.hi per int32 lane (the int16 halves).
  static I idot(I acc, I a, I b) { return _mm512_dpwssd_epi32(acc, a, b); }
  static R to_float(I x) { return _mm512_cvtepi32_ps(x); }
};

}  // namespace

const PathKernels kKernels = FusedAttention<Vec>::kernels();

}  // namespace lorakv::kernels::cpu::avx512vnni

#else  // not an x86 build with AVX-512 VNNI flags: never selected (common/cpu_features.h)

namespace lorakv::kernels::cpu::avx512vnni {
const PathKernels kKernels = {nullptr, nullptr, nullptr};
}

#endif

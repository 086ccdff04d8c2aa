// kernels/cpu/quant_gemv_avx512vnni.cpp: the AVX-512 path's integer kernel with AVX-512
// VNNI's fused dot product (vpdpbusd). Built with the AVX-512 flags and -mavx512vnni
// (kernels/CMakeLists.txt); run only where cpu::has_vnni(features, kAvx512).
#include "lorakv/kernels/cpu/quant_gemv.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include "lorakv/kernels/cpu/quant_dot_impl.h"
#include "lorakv/kernels/cpu/quant_vec_avx512.h"

namespace lorakv::kernels::cpu::avx512vnni {

void quant_dot_gemv(const QuantDotArgs& args, int64_t row_begin, int64_t row_end) {
  QuantDotGemv<x86::Avx512Vec>::run(args, row_begin, row_end);
}

}  // namespace lorakv::kernels::cpu::avx512vnni

#else  // not an x86 build with AVX-512 VNNI flags: never selected (common/cpu_features.h)
#include <cstdlib>
namespace lorakv::kernels::cpu::avx512vnni {
void quant_dot_gemv(const QuantDotArgs&, int64_t, int64_t) { std::abort(); }
}  // namespace lorakv::kernels::cpu::avx512vnni
#endif

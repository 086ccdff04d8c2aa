// kernels/cpu/quant_gemv_avxvnni.cpp: the AVX2 path's integer kernel with AVX-VNNI's fused
// dot product (vpdpbusd, VEX-encoded), for CPUs that have it without AVX-512. Built with the
// AVX2 flags and -mavxvnni (kernels/CMakeLists.txt); run only where
// cpu::has_vnni(features, kAvx2).
#include "lorakv/kernels/cpu/quant_gemv.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__AVXVNNI__)
#include "lorakv/kernels/cpu/quant_dot_impl.h"
#include "lorakv/kernels/cpu/quant_vec_avx2.h"

namespace lorakv::kernels::cpu::avxvnni {

void quant_dot_gemv(const QuantDotArgs& args, int64_t row_begin, int64_t row_end) {
  QuantDotGemv<x86::Avx2Vec>::run(args, row_begin, row_end);
}

}  // namespace lorakv::kernels::cpu::avxvnni

#else  // a compiler or target without AVX-VNNI: never selected (common/cpu_features.h)
#include <cstdlib>
namespace lorakv::kernels::cpu::avxvnni {
void quant_dot_gemv(const QuantDotArgs&, int64_t, int64_t) { std::abort(); }
}  // namespace lorakv::kernels::cpu::avxvnni
#endif

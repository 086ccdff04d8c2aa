// kernels/cpu/quant_gemv_avx2.cpp: the AVX2 path (8 floats per register), float and integer
// kernels. Built with -mavx2 -mfma -mf16c for this file only (kernels/CMakeLists.txt); run
// only where common/cpu_features.h finds AVX2 and FMA (every such CPU has F16C).
#include "lorakv/kernels/cpu/quant_gemv.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "lorakv/kernels/cpu/quant_dot_impl.h"
#include "lorakv/kernels/cpu/quant_gemv_impl.h"
#include "lorakv/kernels/cpu/quant_vec_avx2.h"

namespace lorakv::kernels::cpu::avx2 {

void quant_gemv(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end) {
  QuantGemv<x86::Avx2Vec>::run(args, row_begin, row_end);
}

void quant_dot_gemv(const QuantDotArgs& args, int64_t row_begin, int64_t row_end) {
  QuantDotGemv<x86::Avx2Vec>::run(args, row_begin, row_end);
}

}  // namespace lorakv::kernels::cpu::avx2

#else  // not an x86 build with AVX2 flags: never selected (common/cpu_features.h)
#include <cstdlib>
namespace lorakv::kernels::cpu::avx2 {
void quant_gemv(const QuantGemvArgs&, int64_t, int64_t) { std::abort(); }
void quant_dot_gemv(const QuantDotArgs&, int64_t, int64_t) { std::abort(); }
}  // namespace lorakv::kernels::cpu::avx2
#endif

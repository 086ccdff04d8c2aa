// kernels/cpu/quant_gemv_avx512.cpp: the AVX-512 path (16 floats per register), float and
// integer kernels. Built with -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c for this
// file only (kernels/CMakeLists.txt); run only where common/cpu_features.h finds AVX-512.
#include "lorakv/kernels/cpu/quant_gemv.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include "lorakv/kernels/cpu/quant_dot_impl.h"
#include "lorakv/kernels/cpu/quant_gemv_impl.h"
#include "lorakv/kernels/cpu/quant_vec_avx512.h"

namespace lorakv::kernels::cpu::avx512 {

void quant_gemv(const QuantGemvArgs& args, int64_t row_begin, int64_t row_end) {
  QuantGemv<x86::Avx512Vec>::run(args, row_begin, row_end);
}

void quant_dot_gemv(const QuantDotArgs& args, int64_t row_begin, int64_t row_end) {
  QuantDotGemv<x86::Avx512Vec>::run(args, row_begin, row_end);
}

}  // namespace lorakv::kernels::cpu::avx512

#else  // not an x86 build with AVX-512 flags: never selected (common/cpu_features.h)
#include <cstdlib>
namespace lorakv::kernels::cpu::avx512 {
void quant_gemv(const QuantGemvArgs&, int64_t, int64_t) { std::abort(); }
void quant_dot_gemv(const QuantDotArgs&, int64_t, int64_t) { std::abort(); }
}  // namespace lorakv::kernels::cpu::avx512
#endif

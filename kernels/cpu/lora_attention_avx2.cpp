// kernels/cpu/lora_attention_avx2.cpp: the AVX2 + FMA path (8 floats per register). Built
// with -mavx2 -mfma for this file only (kernels/CMakeLists.txt) and run only when
// common/cpu_features.h says the CPU and OS support it.
#include "lorakv/kernels/cpu/lora_attention_plan.h"

#if defined(__AVX2__) && defined(__FMA__)
#include "lorakv/kernels/cpu/lora_attention_impl.h"
#include "lorakv/kernels/cpu/lora_attention_vec_avx2.h"

namespace lorakv::kernels::cpu::avx2 {

const PathKernels kKernels = FusedAttention<x86::AttentionAvx2Vec>::kernels();

}  // namespace lorakv::kernels::cpu::avx2

#else  // not built for AVX2 (another architecture): never selected, see cpu_features.h

namespace lorakv::kernels::cpu::avx2 {
const PathKernels kKernels = {nullptr, nullptr, nullptr};
}

#endif

// kernels/cpu/lora_attention_avx512.cpp: the AVX-512 path (16 floats per register). Built
// with -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma for this file only
// (kernels/CMakeLists.txt) and run only when common/cpu_features.h says the CPU and OS
// support it, so the binary still runs on AVX2-only machines.
#include "lorakv/kernels/cpu/lora_attention_plan.h"

#if defined(__AVX512F__)
#include "lorakv/kernels/cpu/lora_attention_impl.h"
#include "lorakv/kernels/cpu/lora_attention_vec_avx512.h"

namespace lorakv::kernels::cpu::avx512 {

const PathKernels kKernels = FusedAttention<x86::AttentionAvx512Vec>::kernels();

}  // namespace lorakv::kernels::cpu::avx512

#else  // not built for AVX-512 (another architecture): never selected, see cpu_features.h

namespace lorakv::kernels::cpu::avx512 {
const PathKernels kKernels = {nullptr, nullptr, nullptr};
}

#endif

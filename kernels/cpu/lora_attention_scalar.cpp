// kernels/cpu/lora_attention_scalar.cpp: the portable path (one float per "register"; the
// compiler may auto-vectorise it for the build's baseline ISA). Every CPU runs it, and it is
// the path the vector ones are compared with.
#include <math.h>

#include <cstdint>
#include <cstring>

#include "lorakv/kernels/cpu/lora_attention_impl.h"

namespace lorakv::kernels::cpu::scalar {
namespace {

struct Vec {
  using R = float;
  static constexpr int kW = 1;
  static constexpr int kScoreRegs = 4;  // keys per score block
  static constexpr int kAccRegs = 8;    // P.V and P.C accumulators per pass
  static constexpr int kExpandRegs = 8;
  static constexpr bool kHasTranspose = false;
  static constexpr int kRegs = 16;
  static constexpr bool kIntDot = false;
  static void transpose(const float* const*, int64_t, float*, int64_t) {}
  static R zero() { return 0.f; }
  static R set1(float x) { return x; }
  static R load(const float* p) { return *p; }
  static void store(float* p, R x) { *p = x; }
  static R load_bf16(const uint16_t* p) {
    const uint32_t bits = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  static R load_i8(const int8_t* p) { return static_cast<float>(*p); }
  static R add(R a, R b) { return a + b; }
  static R sub(R a, R b) { return a - b; }
  static R mul(R a, R b) { return a * b; }
  static R fma(R a, R b, R c) { return a * b + c; }
  static R max(R a, R b) { return a > b ? a : b; }
  static R keep_if_ge(R x, R a, R b) { return a >= b ? x : -__builtin_inff(); }
  static float hmax(R a) { return a; }
  static float hsum(R a) { return a; }
  static R exp(R x) { return x < -87.0f ? 0.f : expf(x); }
};

}  // namespace

const PathKernels kKernels = FusedAttention<Vec>::kernels();

}  // namespace lorakv::kernels::cpu::scalar

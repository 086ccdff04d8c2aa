// kernels/cpu/lora_rows_scalar.cpp: see lora_rows.h. Built at -O3 (kernels/CMakeLists.txt).
#include <cstddef>
#include <vector>

#include "lorakv/kernels/cpu/lora_rows.h"

namespace lorakv::kernels::cpu {

void lora_rows_update(const LoraRowsArgs& a, int64_t begin, int64_t end) {
  std::vector<float> t(static_cast<std::size_t>(a.rank));
  for (int64_t i = begin; i < end; ++i) {
    const float* x = a.x + a.rows[i] * a.ldx;
    float* out = a.out + a.rows[i] * a.ldo;
    const float* at = a.a_t + i * a.in * a.rank;
    const float* bt = a.b_t + i * a.rank * a.out_dim;
    // t = A x, as Σ_j x_j A^T[j, :]: one axpy of rank floats per input element.
    for (int64_t k = 0; k < a.rank; ++k) t[static_cast<std::size_t>(k)] = 0;
    for (int64_t j = 0; j < a.in; ++j) {
      const float xj = x[j];
      const float* row = at + j * a.rank;
      for (int64_t k = 0; k < a.rank; ++k) t[static_cast<std::size_t>(k)] += xj * row[k];
    }
    // out += B t, as Σ_k t_k B^T[k, :].
    for (int64_t k = 0; k < a.rank; ++k) {
      const float tk = t[static_cast<std::size_t>(k)];
      const float* row = bt + k * a.out_dim;
      for (int64_t o = 0; o < a.out_dim; ++o) out[o] += tk * row[o];
    }
  }
}

}  // namespace lorakv::kernels::cpu

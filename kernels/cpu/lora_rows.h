// kernels/cpu/lora_rows.h: the LoRA update of single rows, each with its own adapter (a
// decode step of a mixed batch), in plain loops: out_i += B_i (A_i x_i). The factors come
// transposed (A^T [in, r], B^T [r, out]) so both loops are axpys over contiguous memory,
// which the compiler vectorises without reordering any sum. Float32. Torch-free.
#pragma once

#include <cstdint>

namespace lorakv::kernels::cpu {

struct LoraRowsArgs {
  const float* x = nullptr;  // [*, ldx]: the projection's input rows
  int64_t ldx = 0;
  int64_t in = 0;
  float* out = nullptr;      // [*, ldo]: the projection's output rows (updated in place)
  int64_t ldo = 0;
  int64_t out_dim = 0;
  int64_t rank = 0;
  const int64_t* rows = nullptr;  // [n]: row i of the update is x/out row rows[i]
  const float* a_t = nullptr;     // [n, in, rank]: A_i^T
  const float* b_t = nullptr;     // [n, rank, out_dim]: B_i^T (LoRA scale folded in)
};

// Updates rows [begin, end) of the n.
void lora_rows_update(const LoraRowsArgs& args, int64_t begin, int64_t end);

}  // namespace lorakv::kernels::cpu

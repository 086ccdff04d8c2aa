// kernels/quant_matrix.h: a weight matrix kept in a 4- or 8-bit block form in memory, and
// the projection y = x · W^T computed from those blocks (no float copy of W is kept).
//
// Why: at batch 1 a decode step reads every weight once, so its time is the bytes of the
// weights over the memory bandwidth. 4-bit blocks are about a sixth of float32's bytes.
//
// Formats (blocks of 32 consecutive elements of a row, one scale per block, as GGUF's):
//   kQ4: element = d · q + m, q a 4-bit code in 0..15, d and m IEEE half. GGUF's Q4_1 is
//        this; its Q4_0 (element = (q - 8) · d) is this with m = -8d, exact in half.
//   kQ8: element = d · q, q an int8 code, d IEEE half (GGUF's Q8_0).
// Storage, split per field so the vector loops read three dense streams:
//   codes:  uint8 [rows, cols / 2] for kQ4: byte j of block b holds element 32b + j in its
//           low nibble and element 32b + 16 + j in its high nibble (GGUF's order);
//           int8 [rows, cols] for kQ8.
//   scales: int16 [rows, cols / 32], the bit patterns of d.
//   mins:   int16 [rows, cols / 32], the bit patterns of m (kQ4 only; undefined for kQ8).
//
// Arithmetic of linear(): per row and block, d · Σ q·x + m · Σ x in float32, which equals
// Σ (d·q + m)·x in real arithmetic; it differs from "dequantise then multiply" only in
// float32 rounding and summation order (bounded in tests/kernels/quant_matrix_test.cpp).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "lorakv/common/cpu_features.h"
#include "lorakv/kernels/quant_view.h"

namespace lorakv::kernels {

class QuantMatrix {
 public:
  QuantMatrix() = default;
  // Takes the three storage tensors (layout above; CPU, contiguous). Throws
  // InvalidArgumentError naming the tensor whose shape or dtype is wrong.
  QuantMatrix(QuantFormat format, at::Tensor codes, at::Tensor scales, at::Tensor mins);

  // Quantises a float matrix [rows, cols] (cols % 32 == 0) to `format`, rounding to the
  // nearest code per block as ggml does (kQ4: d = (max - min) / 15, m = min; kQ8:
  // d = absmax / 127). For tests and for building weights of realistic strength.
  static QuantMatrix quantize(const at::Tensor& w, QuantFormat format);

  bool defined() const { return codes_.defined(); }
  QuantFormat format() const { return format_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  QuantMatrixView view() const;
  // Bytes of codes, scales and mins.
  int64_t nbytes() const;

  // The matrix as float32 [rows, cols] (d·q + m per element, in float32).
  at::Tensor dequantize() const;
  // Rows `ids` (int64 [n]) as float32 [n, cols]: an embedding lookup.
  at::Tensor dequantize_rows(const at::Tensor& ids) const;
  // A new matrix of rows `order[i]` (int64 [rows']): row permutations and selections are
  // exact (blocks never span rows).
  QuantMatrix select_rows(const at::Tensor& order) const;
  // The rows of several matrices of one format and width stacked in order (one projection
  // for q, k and v together). Throws InvalidArgumentError on a format or width mismatch.
  static QuantMatrix stack_rows(const std::vector<const QuantMatrix*>& parts);

  // y = x · W^T: x float32 or bfloat16 [M, cols] (rows may be strided), y [M, rows] in
  // x's dtype. Small M (decode) reads the blocks directly in vector code chosen at run
  // time (`path`, default the process's); large M (prefill) dequantises W and multiplies
  // with ATen's GEMM, whose compute dominates then: in float32, or for bfloat16 x in
  // bfloat16 where bf16_gemm_is_native() (W's values then rounded to bfloat16).
  at::Tensor linear(const at::Tensor& x) const;
  at::Tensor linear(const at::Tensor& x, ::lorakv::cpu::VectorPath path) const;
  // The M at or below which linear() reads the blocks directly.
  static constexpr int64_t kDirectMaxRows = 16;
  // Weight rows dequantised at a time by the GEMM path (the per-thread scratch's size).
  static constexpr int64_t kPanelRows = 4096;
  // Whether bfloat16 GEMMs run on bfloat16 hardware here (AVX-512-BF16 on the selected
  // AVX-512 path). Without it ATen's bfloat16 GEMM takes a slow path (prefill several times
  // slower than float32 on AVX2-only CPUs), so bfloat16 prefill multiplies in float32 and
  // rounds the result once instead. LORAKV_CPU_PATH=avx2 forces that route for comparison.
  static bool bf16_gemm_is_native();

 private:
  at::Tensor linear_direct(const at::Tensor& x, ::lorakv::cpu::VectorPath path) const;
  at::Tensor linear_panels(const at::Tensor& x) const;

  QuantFormat format_ = QuantFormat::kQ4;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  at::Tensor codes_;   // uint8 (kQ4) or int8 (kQ8), see above
  at::Tensor scales_;  // int16 [rows, cols / 32]
  at::Tensor mins_;    // int16 [rows, cols / 32] or undefined
};

}  // namespace lorakv::kernels

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
//   codes:  uint8 [rows, cols / 2] for kQ4, in pair order (kernels/quant_view.h): two
//           blocks share 32 bytes, one in the low nibbles and one in the high, each in
//           element order. The constructor takes GGUF's order (byte j of block b holds
//           element 32b + j in its low nibble and 32b + 16 + j in its high) and keeps only
//           the repacked form, the same number of bytes. int8 [rows, cols] for kQ8.
//   scales: int16 [rows, cols / 32], the bit patterns of d.
//   mins:   int16 [rows, cols / 32], the bit patterns of m (kQ4 only; undefined for kQ8).
//
// Arithmetic of linear() for few rows (decode), QuantActivations:
//   kFloat32: per row and block, d · Σ q·x + m · Σ x in float32, which equals Σ (d·q + m)·x
//     in real arithmetic; it differs from "dequantise then multiply" only in float32
//     rounding and summation order (bounded in tests/kernels/quant_matrix_test.cpp).
//   kInt8: x quantised once per call to int8 per block of 32 (d_x = max |x| / 127, as
//     ggml's Q8_1), then d · d_x · Σ q·q_x with the inner sums in int32 (maddubs or
//     vpdpbusd) and m · d_x · Σ q_x: the dequantised W times the dequantised x. It differs
//     from kFloat32 by x's rounding, at most d_x / 2 per element (tests/kernels/
//     quant_dot_test.cpp; the logits' KL in docs/cpu_forward.md).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lorakv/common/cpu_features.h"
#include "lorakv/kernels/quant_view.h"

namespace lorakv::kernels {

// The activations' form in the direct (few-row) kernels. bfloat16 x and the panel path
// (many rows, prefill) always multiply in float32.
enum class QuantActivations {
  kFloat32,  // exact to float32 rounding: the parity suites' form
  kInt8,     // integer dot products (VNNI where cpu::has_vnni), faster
};
// The environment variable that chooses it: "float32" or "int8".
inline constexpr const char* kQuantActivationsVariable = "LORAKV_QUANT_ACTIVATIONS";
// The default when the variable is unset: float32, because int8 activations cost mean KL
// 0.0020 on the parity prompts, above int8 KV's 0.0004 (docs/cpu_forward.md).
inline constexpr QuantActivations kDefaultQuantActivations = QuantActivations::kFloat32;
const char* quant_activations_name(QuantActivations a);  // "float32", "int8"
// The form of that name; ConfigError naming the variable otherwise. Unset or empty: the default.
QuantActivations parse_quant_activations(const std::string& name);
// The process's form: LORAKV_QUANT_ACTIVATIONS read on first call (ConfigError on an
// unknown value, retried next call), then cached. set_quant_activations replaces it, for
// tests and benchmarks that compare both forms in one process.
QuantActivations selected_quant_activations();
void set_quant_activations(QuantActivations activations);

class QuantMatrix {
 public:
  QuantMatrix() = default;
  // Takes the three storage tensors (layout above, kQ4 codes in GGUF's order; CPU,
  // contiguous). Throws InvalidArgumentError naming the tensor whose shape or dtype is wrong.
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
  // time (`path` and `activations`, default the process's; without `activations`, given a
  // path: kFloat32); large M (prefill) dequantises W and multiplies with ATen's GEMM, whose
  // compute dominates then: in float32, or for bfloat16 x in bfloat16 where
  // bf16_gemm_is_native() (W's values then rounded to bfloat16).
  at::Tensor linear(const at::Tensor& x) const;
  at::Tensor linear(const at::Tensor& x, ::lorakv::cpu::VectorPath path,
                    QuantActivations activations = QuantActivations::kFloat32) const;
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
  at::Tensor linear_int8(const at::Tensor& x, ::lorakv::cpu::VectorPath path) const;
  // The constructor's checks, for codes already in the kept order.
  struct StoredOrder {};
  QuantMatrix(StoredOrder, QuantFormat format, at::Tensor codes, at::Tensor scales, at::Tensor mins);
  at::Tensor linear_panels(const at::Tensor& x) const;

  QuantFormat format_ = QuantFormat::kQ4;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  at::Tensor codes_;   // uint8 (kQ4, pair order) or int8 (kQ8), see above
  at::Tensor scales_;  // int16 [rows, cols / 32]
  at::Tensor mins_;    // int16 [rows, cols / 32] or undefined
};

}  // namespace lorakv::kernels

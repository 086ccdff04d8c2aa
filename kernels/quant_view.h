// kernels/quant_view.h: the block-quantised weight formats (kernels/quant_matrix.h explains
// them) and the plain view the CPU loops read. Torch-free.
#pragma once

#include <cstdint>

namespace lorakv::kernels {

enum class QuantFormat { kQ4, kQ8 };
const char* quant_format_name(QuantFormat format);  // "q4", "q8"

inline constexpr int64_t kQuantBlock = 32;  // elements per block

// Raw pointers into a QuantMatrix's storage, rows contiguous.
struct QuantMatrixView {
  QuantFormat format = QuantFormat::kQ4;
  int64_t rows = 0;
  int64_t cols = 0;                  // a multiple of kQuantBlock
  const uint8_t* codes = nullptr;    // [rows, code_bytes_per_row()]
  const uint16_t* scales = nullptr;  // [rows, cols / 32] IEEE half bits of d
  const uint16_t* mins = nullptr;    // [rows, cols / 32] IEEE half bits of m; null for kQ8

  int64_t blocks_per_row() const { return cols / kQuantBlock; }
  int64_t code_bytes_per_row() const { return format == QuantFormat::kQ4 ? cols / 2 : cols; }
};

}  // namespace lorakv::kernels

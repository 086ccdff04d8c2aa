// kernels/quant_view.h: the block-quantised weight formats (kernels/quant_matrix.h explains
// them) and the plain view the CPU loops read. Torch-free.
#pragma once

#include <cstdint>

namespace lorakv::kernels {

enum class QuantFormat { kQ4, kQ8 };
const char* quant_format_name(QuantFormat format);  // "q4", "q8"

inline constexpr int64_t kQuantBlock = 32;  // elements per block

// Raw pointers into a QuantMatrix's storage, rows contiguous.
//
// kQ4 codes are kept in pair order, built at load for the integer dot products: the blocks
// of a row go in pairs (2p, 2p + 1) of 32 bytes, byte j holding element j of block 2p in its
// low nibble and element j of block 2p + 1 in its high nibble. Masking 32 bytes gives one
// block's codes in element order (the operand of maddubs / vpdpbusd against activations in
// element order), shifting gives the next one, and a 64-byte register holds both. A last
// unpaired block (odd blocks per row) keeps GGUF's order: 16 bytes, byte j holding element
// j (low nibble) and j + 16 (high). kQ8 codes are int8 in element order.
struct QuantMatrixView {
  QuantFormat format = QuantFormat::kQ4;
  int64_t rows = 0;
  int64_t cols = 0;                  // a multiple of kQuantBlock
  const uint8_t* codes = nullptr;    // [rows, code_bytes_per_row()]
  const uint16_t* scales = nullptr;  // [rows, cols / 32] IEEE half bits of d
  const uint16_t* mins = nullptr;    // [rows, cols / 32] IEEE half bits of m; null for kQ8

  int64_t blocks_per_row() const { return cols / kQuantBlock; }
  int64_t code_bytes_per_row() const { return format == QuantFormat::kQ4 ? cols / 2 : cols; }
  // Whether block b of a kQ4 row shares its 32 bytes with a neighbour (pair order) or is the
  // last, unpaired block (GGUF's order).
  bool q4_block_is_paired(int64_t b) const { return (b | 1) < blocks_per_row(); }
};

// Element j (0..31) of block b of kQ4 row `row_codes` (pair order, above), 0..15.
inline uint8_t q4_code(const QuantMatrixView& w, const uint8_t* row_codes, int64_t b, int j) {
  if (w.q4_block_is_paired(b)) {
    const uint8_t byte = row_codes[(b & ~int64_t{1}) * 16 + j];
    return (b & 1) ? byte >> 4 : byte & 0x0f;
  }
  const uint8_t byte = row_codes[b * 16 + (j & 15)];
  return j < 16 ? byte & 0x0f : byte >> 4;
}

}  // namespace lorakv::kernels

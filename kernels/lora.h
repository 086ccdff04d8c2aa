// kernels/lora.h: the LoRA shrink/expand op over a packed batch whose rows use different
// adapters (Punica's SGMV idea on ATen): for each group of rows sharing an adapter,
// out[rows] += (x[rows] · A^T) · B^T, with the LoRA scale already folded into B. One
// shrink and one expand matmul per group, never a loop over rows.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace lorakv::kernels {

// The rows of a packed batch that one adapter applies to: either one contiguous range
// [begin, begin + length), or (when `rows` is defined) an arbitrary set.
struct LoraRows {
  int64_t begin = 0;
  int64_t length = 0;
  at::Tensor rows;  // int64 [n] row indices into x/out, or undefined for the range
};

// One group: its rows and the adapter's factors for this projection.
struct LoraSegment {
  LoraRows rows;
  at::Tensor a;  // [r, in], the dtype of x (shrink)
  at::Tensor b;  // [out, r], the dtype of x (expand; the scale alpha/r is folded in)
};

// Adds every segment's low-rank update to `out` in place.
//   x:   [T, in]  the projection's input (float32 or bfloat16)
//   out: [T, out] the base projection x · W^T (+ bias), same dtype as x
// Segments must not overlap (each row belongs to at most one adapter); rows in no segment
// are left as they are (the base model). Throws InvalidArgumentError for factors of the
// wrong shape, dtype or device, and for rows outside the batch.
// Two strategies, same result: per segment, two GEMMs over its rows (prefill, few
// adapters); or, for three or more segments of one rank with at most two rows each on
// average (decode of a mixed batch), each row's A and B gathered and two batched matmuls
// over all rows, so the op count does not grow with the number of adapters.
void lora_add(at::Tensor& out, const at::Tensor& x, const std::vector<LoraSegment>& segments);

}  // namespace lorakv::kernels

// kernels/lora.h: the LoRA shrink/expand op over a packed batch whose rows use different
// adapters (Punica's SGMV idea on ATen): for each group of rows sharing an adapter,
// out[rows] += (x[rows] · A^T) · B^T, with the LoRA scale already folded into B. One
// shrink and one expand matmul per group, never a loop over rows.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <mutex>
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

// The stacked factors of the gathered strategy (below) for one (layer, module), kept across
// calls so a decode step does not copy every adapter's A and B again (8 adapters on all
// seven modules of SmolLM2: about 78 MB per step). An entry is found by the identity of
// the segments' factor tensors, in order, and holds references to them, so their storage
// cannot be freed and reused under a stale entry. Keeps the last kEntries sets. Thread-safe.
class LoraStackCache {
 public:
  static constexpr size_t kEntries = 2;
  struct Stack {
    at::Tensor a;    // [segments, r, in]
    at::Tensor b;    // [segments, out, r]
    at::Tensor a_t;  // [segments, in, r] contiguous, float32 only (the single-row loops)
    at::Tensor b_t;  // [segments, r, out] contiguous, float32 only
  };
  // The stack of `segments`' factors, built on a miss.
  Stack get(const std::vector<LoraSegment>& segments);
  // Drops every entry, so an unloaded adapter's factors are not held here.
  void clear();
  int64_t builds() const { return builds_; }  // misses so far (tests)

 private:
  struct Entry {
    std::vector<at::Tensor> factors;  // a0, b0, a1, b1, ...: the key, held
    Stack stack;
  };
  std::mutex mutex_;
  std::vector<Entry> entries_;  // most recent last
  int64_t builds_ = 0;
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
// `out` may be a view (the columns of one module in a fused q|k|v projection). `stacks`,
// when given, keeps the gathered strategy's stacked factors across calls.
void lora_add(at::Tensor& out, const at::Tensor& x, const std::vector<LoraSegment>& segments,
              LoraStackCache* stacks = nullptr);

}  // namespace lorakv::kernels

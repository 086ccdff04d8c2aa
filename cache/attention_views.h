// cache/attention_views.h: the fused attention's views (kernels/lora_attention.h) of one
// sequence's rows at one layer, filled from the block pools without copying a row. A view
// points into the pools' tensors and holds copies of the block tables only (int32 ids;
// BlockId is a 64-bit StrongId), so it is valid until the next mutation of the cache
// (append, compact, fork, release, create_sequence, attach_residual): build views again
// each step. CPU pools only for now (the CUDA kernel brings device views).
#pragma once

#include <cstdint>
#include <climits>
#include <memory>
#include <vector>

#include "lorakv/cache/paged_kv_cache.h"
#include "lorakv/kernels/lora_attention.h"

namespace lorakv::cache {

namespace detail {
// The kernel's storage of the base pool (K, V, positions) and of a residual pool (C rows; one
// C per row for every KV head of a lane). Throw InvalidArgumentError for a pool that is not
// in CPU memory.
kernels::PagedStorage base_storage(const PagedKvCache& cache);
kernels::PagedStorage residual_storage(const PagedKvCache& cache, int32_t pool);

// A pool's storage and a layer's lane tables. Heap-held, so the pointers the kernel structs
// carry (storage, lanes, blocks) stay valid when a view is moved.
struct PagedLanes {
  kernels::PagedStorage storage;
  std::vector<std::vector<int32_t>> tables;  // per head group: block ids in row order
  std::vector<kernels::LaneRows> lanes;      // per head group, pointing into `tables`
};
}  // namespace detail

// The base rows (K after RoPE, V, stored positions) of every head group of one layer, as
// lanes of heads_per_group KV heads: lane g holds KV heads [g * hpg, (g + 1) * hpg).
class BaseLayerView {
 public:
  // Throws InvalidArgumentError for an unknown sequence, a layer out of range, or a pool
  // that is not in CPU memory.
  // `position_limit`: only rows with a stored position below it (a prefix of each lane,
  // since positions ascend): what a reader that has processed that far may attend over.
  static BaseLayerView of(const PagedKvCache& cache, SeqId seq, int64_t layer,
                          int64_t position_limit = kAllPositions);
  static constexpr int64_t kAllPositions = INT64_MAX;

  // For kernels::SharedBase::rows; points into this view, so keep it alive while the
  // kernel runs.
  kernels::PagedRows rows() const;
  const kernels::PagedStorage& storage() const { return lanes_->storage; }
  int64_t num_lanes() const { return static_cast<int64_t>(lanes_->lanes.size()); }
  const kernels::LaneRows& lane(int64_t group) const { return lanes_->lanes.at(static_cast<size_t>(group)); }

 private:
  BaseLayerView(std::unique_ptr<const detail::PagedLanes> lanes, int64_t heads_per_lane)
      : lanes_(std::move(lanes)), heads_per_lane_(heads_per_lane) {}

  std::unique_ptr<const detail::PagedLanes> lanes_;
  int64_t heads_per_lane_ = 0;
};

// One residual stream's C rows at one layer, parallel to the base lanes: row i of lane g
// belongs to base row i of lane g. One C per row serves every KV head of the lane.
class ResidualLayerView {
 public:
  // Throws InvalidArgumentError as BaseLayerView::of does, and for a stream the sequence
  // does not have or one that lacks C rows for some base rows of the layer (the kernel needs
  // one per shared row: append the stream's rows first).
  // `position_limit` as in BaseLayerView::of: C rows are needed for the base rows below it.
  static ResidualLayerView of(const PagedKvCache& cache, SeqId seq, const ContentKey& stream, int64_t layer,
                              int64_t position_limit = BaseLayerView::kAllPositions);

  int64_t rank() const { return rank_; }  // 0: the module is not adapted at this layer

  // The stream for kernels::AgentAttention::v (or ::k). B belongs to the agent: float32,
  // LoRA scale folded in, element (KV head g, rank j, dim d) at
  // b[g * b_head_stride + j * b_rank_stride + d]. Rank 0: an empty stream, b unused.
  // Points into this view, so keep it alive while the kernel runs.
  kernels::LowRankStream stream(const float* b, int64_t b_head_stride, int64_t b_rank_stride) const;
  // Null at rank 0.
  const kernels::PagedStorage* storage() const { return lanes_ ? &lanes_->storage : nullptr; }

 private:
  ResidualLayerView(std::unique_ptr<const detail::PagedLanes> lanes, int64_t rank)
      : lanes_(std::move(lanes)), rank_(rank) {}

  std::unique_ptr<const detail::PagedLanes> lanes_;  // null at rank 0
  int64_t rank_ = 0;
};

}  // namespace lorakv::cache

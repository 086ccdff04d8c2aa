// cache/step_views.h: the fused kernel's views for every layer of one engine step, built once
// per step from the block tables (host bookkeeping only, never the pools' rows). A read is a
// sequence's base rows below a position limit (shared rows, or an agent's private rows), or
// a residual stream's C rows beside them; each gets one kernels::LaneRows per layer and head
// group, pointing into one int32 block-id buffer. Each lane carries the largest position its
// rows are rotated to, taken from the cache's position mirror, so the kernel checks its RoPE
// table against metadata and never reads a row to check it (the positions themselves are
// checked where they are written: CacheManager::can_append). Valid until the next mutation
// of the cache. CPU pools only for now (the CUDA kernel brings device views). Per-row inputs
// and outputs the eviction issue adds (attention-mass buffers, int8 scales, RoPE positions
// after compaction) become further per-read arrays here, built in the same pass.
#pragma once

#include <cstdint>
#include <vector>

#include "lorakv/cache/attention_views.h"
#include "lorakv/cache/paged_kv_cache.h"
#include "lorakv/kernels/lora_attention.h"

namespace lorakv::cache {

class StepViews {
 public:
  explicit StepViews(const PagedKvCache& cache);
  StepViews(const StepViews&) = delete;
  StepViews& operator=(const StepViews&) = delete;

  // A read of `seq`'s base rows with a stored position below `position_limit`; the same
  // (seq, limit) returns the same id. Throws InvalidArgumentError for an unknown sequence.
  // `rope_first` >= 0 (keys stored before RoPE, CacheConfig::keys_before_rope): row i of each
  // lane is rotated to rope_first + i (kernels::LaneRows::rope_from_row).
  int64_t add_base(SeqId seq, int64_t position_limit = BaseLayerView::kAllPositions, int64_t rope_first = -1);
  // The rows of base read `base`'s first lane (layer 0): where rows read after them start
  // their RoPE positions.
  int64_t rows_read(int64_t base) const;
  // A read of a residual stream's C rows for the rows of base read `base`. Throws
  // InvalidArgumentError for a stream the sequence lacks, or one without C rows for some of
  // the base rows (append its rows before attending).
  int64_t add_residual(int64_t base, const ContentKey& stream);
  // After the last add: from here on the lanes point into the block-id buffer.
  void finish();

  // For kernels::SharedBase::rows or AgentAttention::private_rows at `layer`.
  kernels::PagedRows base_rows(int64_t base, int64_t layer) const;
  // 0: the module is not adapted at `layer`.
  int64_t residual_rank(int64_t residual, int64_t layer) const;
  // For kernels::AgentAttention::v (or ::k) at `layer`, read with the agent's B (float32,
  // element (KV head g, rank j, dim d) at b[g * b_head_stride + j * b_rank_stride + d]).
  kernels::LowRankStream residual_stream(int64_t residual, int64_t layer, const float* b, int64_t b_head_stride,
                                         int64_t b_rank_stride) const;

 private:
  struct BaseRead {
    SeqId seq;
    int64_t limit = 0;
    int64_t rope_first = -1;
    size_t first_lane = 0;  // lanes_[first_lane + layout lane]
  };
  struct ResidualRead {
    size_t first_lane = 0;
    std::vector<int64_t> ranks;  // per layer
    std::vector<int32_t> pools;  // per layer; -1 at rank 0
  };
  void add_lane(const BlockTable& table, int64_t rows, int64_t max_rope_position, const uint8_t* live = nullptr);

  const PagedKvCache& cache_;
  kernels::PagedStorage base_storage_;
  std::vector<kernels::PagedStorage> pool_storage_;  // per pool id; [0] unused (base_storage_)
  std::vector<int32_t> block_ids_;
  std::vector<size_t> lane_first_id_;    // per entry of lanes_: its first id in block_ids_
  std::vector<kernels::LaneRows> lanes_;
  std::vector<BaseRead> bases_;
  std::vector<ResidualRead> residuals_;
  bool finished_ = false;
};

}  // namespace lorakv::cache

// cache/step_views.cpp: one step's kernel views, every layer at once, from the block tables.
#include "lorakv/cache/step_views.h"

#include <algorithm>
#include <sstream>

#include "lorakv/common/errors.h"

namespace lorakv::cache {

namespace {


int64_t last_position(const BaseLane& lane, int64_t rows) {
  return rows > 0 ? lane.positions[static_cast<size_t>(rows - 1)] : -1;
}

}  // namespace

StepViews::StepViews(const PagedKvCache& cache) : cache_(cache), base_storage_(detail::base_storage(cache)) {}

void StepViews::add_lane(const BlockTable& table, int64_t rows, int64_t max_rope_position, const uint8_t* live) {
  lane_first_id_.push_back(block_ids_.size());
  const int64_t blocks = cache_.layout().blocks_for(rows);  // only the blocks the rows use
  for (int64_t b = 0; b < blocks; ++b) block_ids_.push_back(static_cast<int32_t>(table.blocks[static_cast<size_t>(b)].value()));
  kernels::LaneRows lane;  // blocks set by finish(), once block_ids_ stops growing
  lane.num_rows = rows;
  lane.max_rope_position = max_rope_position;
  lane.live = live;
  lanes_.push_back(lane);
}

int64_t StepViews::add_base(SeqId seq, int64_t position_limit, int64_t rope_first) {
  LORAKV_ASSERT(!finished_, "StepViews: add after finish");
  for (size_t i = 0; i < bases_.size(); ++i) {
    const BaseRead& b = bases_[i];
    if (b.seq == seq && b.limit == position_limit && b.rope_first == rope_first) return static_cast<int64_t>(i);
  }
  LORAKV_CHECK(cache_.manager().has_sequence(seq), InvalidArgumentError, "StepViews: unknown sequence " << seq.value());
  const SequenceState& s = cache_.manager().sequence(seq);
  bases_.push_back({seq, position_limit, rope_first, lanes_.size()});
  for (const BaseLane& lane : s.lanes) {
    const int64_t rows = lane.rows_below(position_limit);
    add_lane(lane.table, rows, rope_first >= 0 ? rope_first + rows - 1 : last_position(lane, rows),
             lane.live.empty() ? nullptr : lane.live.data());
    lanes_.back().rope_from_row = rope_first;
  }
  return static_cast<int64_t>(bases_.size() - 1);
}

int64_t StepViews::rows_read(int64_t base) const {
  return lanes_.at(bases_.at(static_cast<size_t>(base)).first_lane).num_rows;
}

int64_t StepViews::add_residual(int64_t base, const ContentKey& stream) {
  LORAKV_ASSERT(!finished_, "StepViews: add after finish");
  const BaseRead& read = bases_.at(static_cast<size_t>(base));
  const SequenceState& s = cache_.manager().sequence(read.seq);
  const ResidualStream* found = s.find_residual(stream);
  if (found == nullptr) {
    std::ostringstream os;
    os << "StepViews: sequence " << read.seq.value() << " has no such residual stream (" << stream.adapter << ")";
    throw InvalidArgumentError(os.str());
  }
  const ResidualStream& r = *found;
  ResidualRead out;
  out.first_lane = lanes_.size();
  out.ranks = r.ranks;
  out.pools = r.pools;
  const CacheLayout& l = cache_.layout();
  for (int64_t lane = 0; lane < l.num_lanes(); ++lane) {
    const kernels::LaneRows& base_lane = lanes_[read.first_lane + static_cast<size_t>(lane)];
    const BlockTable& table = r.lanes[static_cast<size_t>(lane)];
    if (r.pools[static_cast<size_t>(l.layer_of(lane))] < 0) {
      add_lane(table, 0, -1);
      continue;
    }
    LORAKV_CHECK(table.num_rows >= base_lane.num_rows, InvalidArgumentError,
                 "StepViews: the stream holds C rows for " << table.num_rows << " of the " << base_lane.num_rows
                                                           << " base rows of lane " << lane << " (covers positions below "
                                                           << r.covered << "); append its rows before attending");
    add_lane(table, base_lane.num_rows, base_lane.max_rope_position);
  }
  for (int32_t pool : out.pools) {
    if (pool < 0) continue;
    if (pool_storage_.size() <= static_cast<size_t>(pool)) pool_storage_.resize(static_cast<size_t>(pool) + 1);
    if (!pool_storage_[static_cast<size_t>(pool)].k) pool_storage_[static_cast<size_t>(pool)] = detail::residual_storage(cache_, pool);
  }
  residuals_.push_back(std::move(out));
  return static_cast<int64_t>(residuals_.size() - 1);
}

void StepViews::finish() {
  for (size_t i = 0; i < lanes_.size(); ++i) lanes_[i].blocks = block_ids_.data() + lane_first_id_[i];
  finished_ = true;
}

kernels::PagedRows StepViews::base_rows(int64_t base, int64_t layer) const {
  LORAKV_ASSERT(finished_, "StepViews: read before finish");
  const CacheLayout& l = cache_.layout();
  const BaseRead& read = bases_.at(static_cast<size_t>(base));
  return {&base_storage_, &lanes_[read.first_lane + static_cast<size_t>(l.lane(layer, 0))], l.heads_per_group};
}

int64_t StepViews::residual_rank(int64_t residual, int64_t layer) const {
  return residuals_.at(static_cast<size_t>(residual)).ranks.at(static_cast<size_t>(layer));
}

kernels::LowRankStream StepViews::residual_stream(int64_t residual, int64_t layer, const float* b,
                                                  int64_t b_head_stride, int64_t b_rank_stride) const {
  LORAKV_ASSERT(finished_, "StepViews: read before finish");
  const ResidualRead& read = residuals_.at(static_cast<size_t>(residual));
  kernels::LowRankStream s;
  const int64_t rank = read.ranks.at(static_cast<size_t>(layer));
  if (rank == 0) return s;
  s.rank = rank;
  s.c_storage = &pool_storage_.at(static_cast<size_t>(read.pools[static_cast<size_t>(layer)]));
  s.c_lanes = &lanes_[read.first_lane + static_cast<size_t>(cache_.layout().lane(layer, 0))];
  s.b = b;
  s.b_head_stride = b_head_stride;
  s.b_rank_stride = b_rank_stride;
  return s;
}

}  // namespace lorakv::cache

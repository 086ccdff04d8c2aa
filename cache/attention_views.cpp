// cache/attention_views.cpp: kernel views over the pools' tensors; only block ids are copied.
#include "lorakv/cache/attention_views.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "lorakv/common/errors.h"

namespace lorakv::cache {

namespace {

kernels::ElementType element_type_of(StorageDtype dtype) {
  switch (dtype) {
    case StorageDtype::kFloat32: return kernels::ElementType::kFloat32;
    case StorageDtype::kBFloat16: return kernels::ElementType::kBFloat16;
    case StorageDtype::kInt8: return kernels::ElementType::kInt8;
  }
  throw InvalidArgumentError("attention views: unknown storage dtype");
}

void check_sequence_and_layer(const PagedKvCache& cache, SeqId seq, int64_t layer, const char* op) {
  LORAKV_CHECK(cache.manager().has_sequence(seq), InvalidArgumentError,
               op << ": unknown sequence " << seq.value());
  const int64_t layers = cache.layout().num_layers;
  LORAKV_CHECK(layer >= 0 && layer < layers, InvalidArgumentError,
               op << ": layer " << layer << " outside 0.." << layers - 1);
}

// The kernel reads raw host pointers; a pool elsewhere must not hand it device addresses.
void check_on_cpu(const at::Tensor& rows, int32_t pool, const char* op) {
  LORAKV_CHECK(rows.device().is_cpu(), InvalidArgumentError,
               op << ": pool " << pool << " lives on " << rows.device()
                  << "; the fused attention reads CPU pools only (device views come with the CUDA kernel)");
}

// Storage of a pool tensor [num_blocks, block_size, ...row], strides taken from the tensor.
kernels::PagedStorage storage_of(const at::Tensor& rows, StorageDtype dtype, int64_t head_stride) {
  LORAKV_ASSERT(rows.is_contiguous(), "block pool rows must be contiguous");
  // Block tables are int32 in the kernel: every id of the pool must fit.
  LORAKV_CHECK(rows.size(0) <= std::numeric_limits<int32_t>::max(), InvalidArgumentError,
               "attention views: a pool of " << rows.size(0) << " blocks cannot be addressed by int32 block ids");
  kernels::PagedStorage s;
  s.k = rows.data_ptr();
  s.dtype = element_type_of(dtype);
  s.num_blocks = rows.size(0);
  s.block_size = rows.size(1);
  s.block_stride = rows.stride(0);
  s.row_stride = rows.stride(1);
  s.head_stride = head_stride;
  return s;
}

kernels::LaneRows add_lane(detail::PagedLanes& out, const BlockTable& table, int64_t num_rows, int64_t max_position) {
  std::vector<int32_t>& ids = out.tables.emplace_back();
  ids.reserve(table.blocks.size());
  for (BlockId b : table.blocks) ids.push_back(static_cast<int32_t>(b.value()));
  kernels::LaneRows lane;  // blocks set once `tables` stops growing
  lane.num_rows = num_rows;
  lane.max_rope_position = max_position;
  return lane;
}

// The position of the lane's row `rows - 1` (positions ascend: the largest of the first
// `rows`), from the host mirror; -1 for no rows.
int64_t last_position(const BaseLane& lane, int64_t rows) {
  return rows > 0 ? lane.positions[static_cast<size_t>(rows - 1)] : -1;
}


void point_lanes_at_tables(detail::PagedLanes& out) {
  for (size_t g = 0; g < out.lanes.size(); ++g) out.lanes[g].blocks = out.tables[g].data();
}

const ResidualStream& find_stream(const PagedKvCache& cache, SeqId seq, const ContentKey& key, const char* op) {
  if (const ResidualStream* r = cache.manager().sequence(seq).find_residual(key)) return *r;
  std::ostringstream os;
  os << op << ": sequence " << seq.value() << " has no residual stream ("
     << (key.kind == StreamKind::kResidualK ? "k" : key.kind == StreamKind::kResidualV ? "v" : "base") << ", "
     << key.adapter << ")";
  throw InvalidArgumentError(os.str());
}

}  // namespace

namespace detail {

kernels::PagedStorage base_storage(const PagedKvCache& cache) {
  const BlockPool& pool = cache.pool(0);
  check_on_cpu(pool.a(), 0, "attention views");
  // k: [num_blocks, block_size, heads_per_group, head_dim]; V alike; positions int32 [num_blocks, block_size].
  kernels::PagedStorage st = storage_of(pool.a(), pool.spec().dtype, pool.a().stride(2));
  LORAKV_ASSERT(pool.b().strides() == pool.a().strides() && pool.positions().is_contiguous(),
                "base pool tensors out of step");
  st.v = pool.b().data_ptr();
  st.positions = pool.positions().data_ptr<int32_t>();
  st.keys_before_rope = cache.manager().config().keys_before_rope;
  if (pool.spec().dtype == StorageDtype::kInt8) {  // scales: float32 [num_blocks, block_size, heads_per_group]
    LORAKV_ASSERT(pool.a_scales().is_contiguous() && pool.b_scales().is_contiguous(), "int8 scales must be contiguous");
    st.k_scales = pool.a_scales().data_ptr<float>();
    st.v_scales = pool.b_scales().data_ptr<float>();
    st.scale_row_stride = pool.a_scales().size(2);
    st.hadamard = pool.spec().hadamard;
  }
  return st;
}

kernels::PagedStorage residual_storage(const PagedKvCache& cache, int32_t pool_id) {
  const BlockPool& pool = cache.pool(pool_id);
  check_on_cpu(pool.a(), pool_id, "attention views");
  // C: [num_blocks, block_size, rank]; head_stride 0: one C per row for all KV heads of a lane.
  return storage_of(pool.a(), pool.spec().dtype, 0);
}

}  // namespace detail

BaseLayerView BaseLayerView::of(const PagedKvCache& cache, SeqId seq, int64_t layer, int64_t position_limit) {
  const char* op = "BaseLayerView::of";
  check_sequence_and_layer(cache, seq, layer, op);
  const CacheLayout& l = cache.layout();
  auto out = std::make_unique<detail::PagedLanes>();
  out->storage = detail::base_storage(cache);
  const SequenceState& s = cache.manager().sequence(seq);
  for (int64_t g = 0; g < l.num_groups(); ++g) {
    const BaseLane& lane = s.lanes.at(static_cast<size_t>(l.lane(layer, g)));
    const int64_t rows = lane.rows_below(position_limit);
    kernels::LaneRows rows_view = add_lane(*out, lane.table, rows, last_position(lane, rows));
    rows_view.live = lane.live.empty() ? nullptr : lane.live.data();  // the manager's mask: valid until it changes
    out->lanes.push_back(rows_view);
  }
  point_lanes_at_tables(*out);
  return BaseLayerView(std::move(out), l.heads_per_group);
}

kernels::PagedRows BaseLayerView::rows() const {
  return {&lanes_->storage, lanes_->lanes.data(), heads_per_lane_};
}

ResidualLayerView ResidualLayerView::of(const PagedKvCache& cache, SeqId seq, const ContentKey& stream,
                                        int64_t layer, int64_t position_limit) {
  const char* op = "ResidualLayerView::of";
  check_sequence_and_layer(cache, seq, layer, op);
  const ResidualStream& r = find_stream(cache, seq, stream, op);
  const int64_t rank = r.ranks.at(static_cast<size_t>(layer));
  if (rank == 0) return ResidualLayerView(nullptr, 0);
  auto out = std::make_unique<detail::PagedLanes>();
  out->storage = detail::residual_storage(cache, r.pools.at(static_cast<size_t>(layer)));
  const CacheLayout& l = cache.layout();
  const SequenceState& s = cache.manager().sequence(seq);
  for (int64_t g = 0; g < l.num_groups(); ++g) {
    const auto lane = static_cast<size_t>(l.lane(layer, g));
    const int64_t base_rows = s.lanes.at(lane).rows_below(position_limit), rows = r.lanes.at(lane).num_rows;
    LORAKV_CHECK(rows >= base_rows, InvalidArgumentError,
                 op << ": the stream holds C rows for " << rows << " of the " << base_rows << " base rows of layer "
                    << layer << ", head group " << g << " (covers positions below " << r.covered
                    << "); append its rows before attending");
    out->lanes.push_back(add_lane(*out, r.lanes.at(lane), base_rows, last_position(s.lanes.at(lane), base_rows)));
  }
  point_lanes_at_tables(*out);
  return ResidualLayerView(std::move(out), rank);
}

kernels::LowRankStream ResidualLayerView::stream(const float* b, int64_t b_head_stride, int64_t b_rank_stride) const {
  kernels::LowRankStream s;
  if (rank_ == 0) return s;
  s.rank = rank_;
  s.c_storage = &lanes_->storage;
  s.c_lanes = lanes_->lanes.data();
  s.b = b;
  s.b_head_stride = b_head_stride;
  s.b_rank_stride = b_rank_stride;
  return s;
}

}  // namespace lorakv::cache

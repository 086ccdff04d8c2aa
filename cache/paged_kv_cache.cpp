// cache/paged_kv_cache.cpp: bookkeeping and storage kept in step; gathers; measured stats.
#include "lorakv/cache/paged_kv_cache.h"

#include <algorithm>

#include "lorakv/common/errors.h"

namespace lorakv::cache {

namespace {
at::Tensor long_tensor(const std::vector<int64_t>& v) {
  return at::tensor(v, at::TensorOptions().dtype(at::kLong));
}

at::IntArrayRef sizes_of(const at::Tensor& t) { return t.defined() ? t.sizes() : at::IntArrayRef{}; }

void check_layer(const CacheLayout& l, int64_t layer, const char* op) {
  LORAKV_CHECK(layer >= 0 && layer < l.num_layers, InvalidArgumentError,
               op << ": layer " << layer << " outside 0.." << l.num_layers - 1);
}

void check_lane(const CacheLayout& l, int64_t layer, int64_t group, const char* op) {
  check_layer(l, layer, op);
  LORAKV_CHECK(group >= 0 && group < l.num_groups(), InvalidArgumentError,
               op << ": head group " << group << " outside 0.." << l.num_groups() - 1);
}
}  // namespace

PagedKvCache::PagedKvCache(CacheConfig config, at::Device device) : manager_(std::move(config)) {
  const CacheConfig& c = manager_.config();
  BlockPoolSpec base;
  base.id = 0;
  base.num_blocks = std::max<int64_t>(c.num_base_blocks, 1);
  base.block_size = c.layout.block_size;
  base.row_shape = {c.layout.heads_per_group, c.layout.head_dim};
  base.dtype = c.base_dtype;
  const int64_t d = c.layout.head_dim;
  base.hadamard = c.base_dtype == StorageDtype::kInt8 && c.int8_hadamard && (d & (d - 1)) == 0;
  base.base = true;
  base.device = device;
  pools_.emplace_back(base);
  for (size_t i = 0; i < c.residual_pools.size(); ++i) {
    BlockPoolSpec r = base;
    r.id = static_cast<int32_t>(i + 1);
    r.num_blocks = std::max<int64_t>(c.residual_pools[i].num_blocks, 1);
    r.row_shape = {c.residual_pools[i].rank};
    r.dtype = c.residual_dtype;
    r.hadamard = false;
    r.base = false;
    pools_.emplace_back(r);
  }
}

int32_t PagedKvCache::ensure_residual_pool(int64_t rank, int64_t num_blocks) {
  const int32_t existing = manager_.pool_for_rank(rank);
  if (existing > 0) return existing;
  const int32_t id = manager_.add_residual_pool({rank, num_blocks});
  BlockPoolSpec r = pools_[0].spec();
  r.id = id;
  r.num_blocks = num_blocks;
  r.row_shape = {rank};
  r.dtype = manager_.config().residual_dtype;
  r.hadamard = false;
  r.base = false;
  pools_.emplace_back(r);
  return id;
}

void PagedKvCache::create_sequence(SeqId seq, const ContentKey& base_key, const PrefixMatch& match) {
  manager_.create_sequence(seq, base_key, match);
}

void PagedKvCache::fork(SeqId src, SeqId dst) { manager_.fork(src, dst); }

int64_t PagedKvCache::attach_residual(SeqId seq, const ContentKey& key, std::vector<int64_t> ranks,
                                      const WriterRuns& writers) {
  return manager_.attach_residual(seq, key, std::move(ranks), writers);
}

void PagedKvCache::release(SeqId seq) { manager_.release(seq); }

std::optional<AppendSlots> PagedKvCache::append(SeqId seq, const AppendRequest& request) {
  std::optional<AppendSlots> slots = manager_.append(seq, request);
  if (!slots) return std::nullopt;
  for (BlockPool& p : pools_) p.apply(slots->ops);
  const auto t = static_cast<int64_t>(request.tokens.size());
  const at::Tensor positions = at::arange(slots->first_position, slots->first_position + t, at::kLong);
  for (const LaneSlots& lane : slots->base) pools_[0].write_positions(long_tensor(lane.slots), positions);
  note_usage();
  return slots;
}

WritePlan PagedKvCache::plan_writes(const AppendSlots& slots) const {
  WritePlan plan;
  auto lane_of = [&](const LaneSlots& s, bool residual) {
    WritePlan::Lane lane;
    lane.pool = s.pool;
    if (s.slots.empty()) return lane;
    lane.slots = long_tensor(s.slots);
    if (residual) {
      lane.token_offsets = long_tensor(s.token_offsets);
      lane.rows_needed = *std::max_element(s.token_offsets.begin(), s.token_offsets.end()) + 1;
    }
    return lane;
  };
  for (const LaneSlots& s : slots.base) plan.base.push_back(lane_of(s, false));
  plan.num_tokens = slots.base.empty() ? 0 : static_cast<int64_t>(slots.base.front().slots.size());
  for (const std::vector<LaneSlots>& r : slots.residual) {
    std::vector<WritePlan::Lane>& lanes = plan.residual.emplace_back();
    for (const LaneSlots& s : r) lanes.push_back(lane_of(s, true));
  }
  return plan;
}

void PagedKvCache::write_base(const WritePlan& slots, int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  const CacheLayout& l = layout();
  check_layer(l, layer, "write_base");
  LORAKV_CHECK(k.defined() && v.defined() && k.dim() == 3 && k.size(1) == l.num_kv_heads && k.size(2) == l.head_dim &&
                   v.sizes() == k.sizes() && k.is_floating_point() && v.is_floating_point(),
               InvalidArgumentError,
               "write_base: float k, v [T, " << l.num_kv_heads << ", " << l.head_dim << "] expected, got "
                                             << sizes_of(k) << " and " << sizes_of(v));
  LORAKV_CHECK(static_cast<int64_t>(slots.base.size()) == l.num_lanes(), InvalidArgumentError,
               "write_base: the slots are not from this cache's append (" << slots.base.size() << " lanes, not "
                                                                          << l.num_lanes() << ")");
  LORAKV_CHECK(slots.num_tokens == k.size(0), InvalidArgumentError,
               "write_base: k, v rows for the append's " << slots.num_tokens << " tokens expected, got " << k.size(0));
  if (slots.num_tokens == 0) return;
  for (int64_t g = 0; g < l.num_groups(); ++g) {
    const WritePlan::Lane& lane = slots.base[static_cast<size_t>(l.lane(layer, g))];
    pools_[0].write(lane.slots, k.narrow(1, g * l.heads_per_group, l.heads_per_group),
                    v.narrow(1, g * l.heads_per_group, l.heads_per_group));
  }
}

BatchWritePlan PagedKvCache::plan_batch_writes(const std::vector<BatchAppend>& appends) const {
  const int64_t lanes = layout().num_lanes();
  BatchWritePlan plan;
  plan.base.resize(static_cast<size_t>(lanes));
  std::vector<int64_t> slots, sources;
  for (int64_t lane = 0; lane < lanes; ++lane) {
    slots.clear();
    sources.clear();
    for (const BatchAppend& a : appends) {
      LORAKV_CHECK(a.slots && static_cast<int64_t>(a.slots->base.size()) == lanes, InvalidArgumentError,
                   "plan_batch_writes: an append's slots are not from this cache (" << (a.slots ? a.slots->base.size() : 0)
                                                                                    << " lanes, not " << lanes << ")");
      const LaneSlots& s = a.slots->base[static_cast<size_t>(lane)];
      for (size_t i = 0; i < s.slots.size(); ++i) {
        slots.push_back(s.slots[i]);
        sources.push_back(a.first_row + static_cast<int64_t>(i));
      }
    }
    if (slots.empty()) continue;
    BatchWritePlan::Lane& out = plan.base[static_cast<size_t>(lane)];
    out.slots = long_tensor(slots);
    const bool consecutive = sources.back() - sources.front() + 1 == static_cast<int64_t>(sources.size()) &&
                             std::is_sorted(sources.begin(), sources.end());
    if (consecutive) {
      out.first_source = sources.front();
    } else {
      out.sources = long_tensor(sources);
    }
  }
  return plan;
}

void PagedKvCache::write_batch_base(const BatchWritePlan& plan, int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  const CacheLayout& l = layout();
  check_layer(l, layer, "write_batch_base");
  LORAKV_CHECK(k.defined() && v.defined() && k.dim() == 3 && k.size(1) == l.num_kv_heads && k.size(2) == l.head_dim &&
                   v.sizes() == k.sizes() && k.is_floating_point() && v.is_floating_point() &&
                   static_cast<int64_t>(plan.base.size()) == l.num_lanes(),
               InvalidArgumentError,
               "write_batch_base: float k, v [B, " << l.num_kv_heads << ", " << l.head_dim << "] and a plan of "
                                                   << l.num_lanes() << " lanes expected, got " << sizes_of(k) << ", "
                                                   << sizes_of(v) << " and " << plan.base.size() << " lanes");
  for (int64_t g = 0; g < l.num_groups(); ++g) {
    const BatchWritePlan::Lane& lane = plan.base[static_cast<size_t>(l.lane(layer, g))];
    if (!lane.slots.defined()) continue;
    const int64_t n = lane.slots.numel();
    auto rows = [&](const at::Tensor& x) {
      const at::Tensor heads = x.narrow(1, g * l.heads_per_group, l.heads_per_group);
      if (lane.sources.defined()) return heads.index_select(0, lane.sources);
      LORAKV_CHECK(lane.first_source + n <= x.size(0), InvalidArgumentError,
                   "write_batch_base: rows " << lane.first_source << ".." << lane.first_source + n - 1
                                             << " of a batch of " << x.size(0));
      return heads.narrow(0, lane.first_source, n);
    };
    pools_[0].write(lane.slots, rows(k), rows(v));
  }
}

void PagedKvCache::write_base_int8(const WritePlan& slots, int64_t layer, const Int8Rows& k, const Int8Rows& v) {
  const CacheLayout& l = layout();
  check_layer(l, layer, "write_base_int8");
  LORAKV_CHECK(static_cast<int64_t>(slots.base.size()) == l.num_lanes() && k.values.defined() &&
                   k.values.dim() == 3 && k.values.size(0) == slots.num_tokens && k.values.size(1) == l.num_kv_heads &&
                   k.scales.defined() && k.scales.dim() == 2 && v.values.defined() && v.scales.defined() &&
                   v.scales.dim() == 2,
               InvalidArgumentError,
               "write_base_int8: int8 k, v [" << slots.num_tokens << ", " << l.num_kv_heads << ", " << l.head_dim
                                              << "] with scales expected, got " << sizes_of(k.values));
  const auto group = [&](const Int8Rows& r, int64_t g) {
    return Int8Rows{r.values.narrow(1, g * l.heads_per_group, l.heads_per_group),
                    r.scales.narrow(1, g * l.heads_per_group, l.heads_per_group)};
  };
  for (int64_t g = 0; g < l.num_groups(); ++g) {
    const WritePlan::Lane& lane = slots.base[static_cast<size_t>(l.lane(layer, g))];
    pools_[0].write_int8(lane.slots, group(k, g), group(v, g));
  }
}

std::pair<Int8Rows, Int8Rows> PagedKvCache::gather_layer_int8(SeqId seq, int64_t layer) const {
  check_layer(layout(), layer, "gather_layer_int8");
  std::vector<at::Tensor> kq, ks, vq, vs;
  for (int64_t g = 0; g < layout().num_groups(); ++g) {
    const at::Tensor slots = long_tensor(manager_.base_slots(seq, layout().lane(layer, g)));
    const Int8Rows k = pools_[0].gather_a_int8(slots), v = pools_[0].gather_b_int8(slots);
    kq.push_back(k.values);
    ks.push_back(k.scales);
    vq.push_back(v.values);
    vs.push_back(v.scales);
  }
  return {{at::cat(kq, 1), at::cat(ks, 1)}, {at::cat(vq, 1), at::cat(vs, 1)}};
}

void PagedKvCache::write_residual(const WritePlan& slots, size_t index, int64_t layer, const at::Tensor& c) {
  const CacheLayout& l = layout();
  check_layer(l, layer, "write_residual");
  LORAKV_CHECK(index < slots.residual.size() && static_cast<int64_t>(slots.residual[index].size()) == l.num_lanes(),
               InvalidArgumentError,
               "write_residual: the append has " << slots.residual.size() << " residual streams, no index " << index);
  LORAKV_CHECK(c.defined() && c.dim() == 2 && c.is_floating_point(), InvalidArgumentError,
               "write_residual: float residual rows c [T, rank] expected, got " << sizes_of(c));
  for (int64_t g = 0; g < l.num_groups(); ++g) {
    const WritePlan::Lane& lane = slots.residual[index][static_cast<size_t>(l.lane(layer, g))];
    if (!lane.slots.defined()) continue;
    const int64_t rank = manager_.pool_rank(lane.pool);
    LORAKV_CHECK(c.size(1) == rank && c.size(0) >= lane.rows_needed, InvalidArgumentError,
                 "write_residual: rows c [T >= " << lane.rows_needed << ", " << rank << "] expected at layer " << layer
                                                 << ", got " << c.sizes());
    // Only the positions this lane keeps get a residual row (per-head token sets); all of
    // them when the lane keeps every position (no gather).
    const bool all = lane.rows_needed == lane.slots.numel() && lane.rows_needed == c.size(0);
    const at::Tensor rows = all ? c : c.index_select(0, lane.token_offsets.to(c.device()));
    pools_[static_cast<size_t>(lane.pool)].write(lane.slots, rows);
  }
}

bool PagedKvCache::adopt_suffix(SeqId seq, SeqId suffix) {
  // In a transaction of its own, so a failed copy leaves both sequences as they were.
  manager_.begin_transaction();
  try {
    const std::optional<StorageOps> ops = manager_.adopt_suffix(seq, suffix);
    if (!ops) {
      manager_.rollback_transaction();
      return false;
    }
    for (BlockPool& p : pools_) p.apply(*ops);
    manager_.commit_transaction();
  } catch (...) {
    manager_.rollback_transaction();
    throw;
  }
  manager_.release(suffix);
  note_usage();
  return true;
}

bool PagedKvCache::compact(SeqId seq, const KeepSets& keep) {
  // Everything that can fail first (the plan, reading the rows to move); then the rows and
  // the tables change together, with nothing left to fail between them.
  std::optional<PlannedCompaction> plan = manager_.plan_compact(seq, keep);
  if (!plan) return false;
  std::vector<BlockPool::PreparedRows> rows;
  rows.reserve(pools_.size());
  for (const BlockPool& p : pools_) rows.push_back(p.prepare(plan->ops()));
  for (size_t p = 0; p < pools_.size(); ++p) pools_[p].write(rows[p]);
  manager_.commit_compact(*plan);
  note_usage();
  return true;
}

EvictionOutcome PagedKvCache::evict(SeqId seq, const KeepSets& keep) { return manager_.evict(seq, keep); }

namespace {
// The slots of a lane's rows (or of rows parallel to them) that are still live.
std::vector<int64_t> live_only(const BaseLane& lane, std::vector<int64_t> slots) {
  if (lane.live.empty()) return slots;
  size_t kept = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (lane.live[i]) slots[kept++] = slots[i];
  }
  slots.resize(kept);
  return slots;
}
}  // namespace

GatheredRows PagedKvCache::gather_lane(SeqId seq, int64_t layer, int64_t group) const {
  check_lane(layout(), layer, group, "gather_lane");
  const BaseLane& lane = manager_.sequence(seq).lanes.at(static_cast<size_t>(layout().lane(layer, group)));
  const at::Tensor slots = long_tensor(live_only(lane, manager_.base_slots(seq, layout().lane(layer, group))));
  // [N, hpg, D] -> [hpg, N, D]
  return {pools_[0].gather_a(slots).transpose(0, 1).contiguous(), pools_[0].gather_b(slots).transpose(0, 1).contiguous(),
          pools_[0].gather_positions(slots)};
}

GatheredRows PagedKvCache::gather_layer(SeqId seq, int64_t layer) const {
  check_layer(layout(), layer, "gather_layer");
  std::vector<at::Tensor> ks, vs;
  at::Tensor positions;
  for (int64_t g = 0; g < layout().num_groups(); ++g) {
    GatheredRows rows = gather_lane(seq, layer, g);
    LORAKV_CHECK(!positions.defined() || at::equal(positions, rows.positions), InvalidArgumentError,
                 "gather_layer: head groups of layer " << layer << " keep different tokens; gather them per lane");
    positions = rows.positions;
    ks.push_back(rows.k);
    vs.push_back(rows.v);
  }
  return {at::cat(ks, 0), at::cat(vs, 0), positions};
}

GatheredResidual PagedKvCache::gather_residual(SeqId seq, const ContentKey& stream, int64_t layer,
                                               int64_t group) const {
  check_lane(layout(), layer, group, "gather_residual");
  const int64_t lane = layout().lane(layer, group);
  const ResidualStream& r = manager_.residual(seq, stream);
  const int32_t pool = r.pools.at(static_cast<size_t>(layer));
  LORAKV_CHECK(pool > 0, InvalidArgumentError, "gather_residual: the stream has no rows at layer " << layer);
  const BaseLane& base = manager_.sequence(seq).lanes.at(static_cast<size_t>(lane));
  const std::vector<int64_t> rows = manager_.residual_slots(seq, stream, lane);
  std::vector<int64_t> base_rows = manager_.base_slots(seq, lane);
  base_rows.resize(rows.size());
  const at::Tensor slots = long_tensor(live_only(base, rows));
  const at::Tensor base_slots = long_tensor(live_only(base, base_rows));
  return {pools_[static_cast<size_t>(pool)].gather_a(slots), pools_[0].gather_positions(base_slots)};
}

int64_t PagedKvCache::bytes_in_use() const {
  int64_t bytes = 0;
  for (size_t p = 0; p < pools_.size(); ++p) {
    bytes += manager_.allocator(static_cast<int32_t>(p)).num_used() * pools_[p].block_bytes();
  }
  return bytes;
}

void PagedKvCache::note_usage() { peak_bytes_ = std::max(peak_bytes_, bytes_in_use()); }

CacheStats PagedKvCache::stats() const {
  CacheStats s;
  const BlockAllocator& base = manager_.allocator(0);
  s.base_k_bytes = base.num_used() * pools_[0].a_bytes_per_block();
  s.base_v_bytes = base.num_used() * pools_[0].b_bytes_per_block();
  s.positions_bytes = base.num_used() * pools_[0].positions_bytes_per_block();
  for (size_t p = 0; p < pools_.size(); ++p) {
    const BlockAllocator& a = manager_.allocator(static_cast<int32_t>(p));
    const int64_t free_blocks = a.num_free() - a.num_cached();
    s.pools.push_back({manager_.pool_rank(static_cast<int32_t>(p)), a.num_used(), a.num_cached(), free_blocks,
                       pools_[p].block_bytes()});
    s.reserved_bytes += pools_[p].reserved_bytes();
    s.cached_bytes += a.num_cached() * pools_[p].block_bytes();
    s.free_bytes += free_blocks * pools_[p].block_bytes();
    if (p == 0) continue;
    for (int64_t b = 0; b < a.num_blocks(); ++b) {
      if (!a.in_use(BlockId(b))) continue;
      s.residual_bytes[manager_.owner_of(static_cast<int32_t>(p), BlockId(b))] += pools_[p].block_bytes();
      s.residual_bytes_total += pools_[p].block_bytes();
    }
  }
  s.metadata_bytes = manager_.host_metadata_bytes();
  s.bytes_in_use = s.base_k_bytes + s.base_v_bytes + s.positions_bytes + s.residual_bytes_total;
  s.peak_bytes_in_use = std::max(peak_bytes_, s.bytes_in_use);
  return s;
}

}  // namespace lorakv::cache

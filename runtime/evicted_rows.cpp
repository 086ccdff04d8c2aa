// runtime/evicted_rows.cpp: export and import of a sequence's rows lane by lane (a context
// with an eviction policy). The cache appends a row to every lane for every position, so a
// lane that holds some positions only is rebuilt by appending a chunk of positions (zeros
// where no lane of the layer holds one) and packing away, lane by lane, the rows it did not
// hold: the pools never hold more than the saved rows plus one chunk.
#include "lorakv/runtime/evicted_rows.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lorakv/common/errors.h"

namespace lorakv::runtime {

namespace {

using Lane = SequenceRows::Lane;

at::Tensor long_tensor(const std::vector<int64_t>& v) { return at::tensor(v, at::TensorOptions().dtype(at::kLong)); }

[[noreturn]] void refuse(const std::string& what, const std::string& where) {
  throw ConfigError("saved lanes are not a state eviction leaves: " + what,
                    {"", where, "", "", "save the context again; a session file checks its tensors"});
}

// The rows [first, last) of a lane whose positions lie in [begin, end) (positions ascend).
std::pair<int64_t, int64_t> rows_between(const std::vector<int32_t>& positions, int64_t begin, int64_t end) {
  const auto lo = std::lower_bound(positions.begin(), positions.end(), begin);
  const auto hi = std::lower_bound(lo, positions.end(), end);
  return {lo - positions.begin(), hi - positions.begin()};
}

// int64 [last - first]: the positions of rows [first, last), less `begin`.
at::Tensor offsets(const std::vector<int32_t>& positions, int64_t first, int64_t last, int64_t begin) {
  std::vector<int64_t> out;
  for (int64_t r = first; r < last; ++r) out.push_back(positions[static_cast<size_t>(r)] - begin);
  return long_tensor(out);
}

// One layer's K or V (`per_lane`: rows.k or rows.v, or their int8 scales) for positions
// [begin, end): [end - begin, kv_heads, head_dim] (scales: [end - begin, kv_heads]), each head
// group's rows from its lane where it holds the position, zeros where not (rows packed away
// before anything reads them).
at::Tensor dense_base(const cache::CacheLayout& l, const SequenceRows& rows, const std::vector<at::Tensor>& per_lane,
                      int64_t layer, int64_t begin, int64_t end) {
  const int64_t hpg = l.heads_per_group;
  std::vector<int64_t> shape{end - begin, l.num_kv_heads};
  shape.insert(shape.end(), per_lane[0].sizes().begin() + 2, per_lane[0].sizes().end());
  at::Tensor out = at::zeros(shape, per_lane[0].options());
  for (int64_t g = 0; g < l.num_groups(); ++g) {
    const auto lane = static_cast<size_t>(l.lane(layer, g));
    const std::vector<int32_t>& positions = rows.lanes[lane].positions;
    const auto [first, last] = rows_between(positions, begin, end);
    if (first == last) continue;
    out.narrow(1, g * hpg, hpg)
        .index_copy_(0, offsets(positions, first, last, begin), per_lane[lane].narrow(0, first, last - first));
  }
  return out;
}

// One layer's residual rows of stream `r` for positions [begin, end): [end - begin, rank].
// C = X A is one row per position whichever head group keeps it; zeros where none does.
at::Tensor dense_residual(const cache::CacheLayout& l, const SequenceRows& rows, const SequenceRows::Residual& r,
                          int64_t layer, int64_t begin, int64_t end) {
  const int64_t rank = r.ranks[static_cast<size_t>(layer)];
  at::Tensor out = at::zeros({end - begin, rank}, r.c[static_cast<size_t>(l.lane(layer, 0))].options());
  for (int64_t g = 0; g < l.num_groups(); ++g) {
    const auto lane = static_cast<size_t>(l.lane(layer, g));
    const std::vector<int32_t>& positions = rows.lanes[lane].positions;
    auto [first, last] = rows_between(positions, begin, end);
    last = std::min(last, r.c[lane].size(0));
    if (first >= last) continue;
    out.index_copy_(0, offsets(positions, first, last, begin), r.c[lane].narrow(0, first, last - first));
  }
  return out;
}

void append_checked(cache::PagedKvCache& cache, SeqId seq, const cache::AppendRequest& request,
                    const std::function<void(const cache::WritePlan&)>& write) {
  if (!cache.can_append(seq, request).ok) {
    throw CapacityError("the pools cannot hold the restored rows",
                        {"", "sequence " + std::to_string(seq.value()), "", "", "raise kv_pool_bytes or close sessions"});
  }
  const std::optional<cache::AppendSlots> slots = cache.append(seq, request);
  LORAKV_ASSERT(slots.has_value(), "append failed after can_append said yes");
  write(cache.plan_writes(*slots));
}

// The end of the run of equal writers starting at `from`.
int64_t run_end(const std::vector<AdapterIdentity>& writers, int64_t from, int64_t end) {
  int64_t b = from + 1;
  while (b < end && writers[static_cast<size_t>(b)] == writers[static_cast<size_t>(from)]) ++b;
  return b;
}

// Base rows for positions [begin, end), one append per run of one writer.
void append_base(cache::PagedKvCache& cache, SeqId seq, const SequenceRows& rows, int64_t begin, int64_t end) {
  const cache::CacheLayout& l = cache.layout();
  for (int64_t a = begin; a < end;) {
    const int64_t b = run_end(rows.writers, a, end);
    cache::AppendRequest req;
    req.tokens.assign(rows.tokens.begin() + a, rows.tokens.begin() + b);
    req.writer = rows.writers[static_cast<size_t>(a)];
    append_checked(cache, seq, req, [&](const cache::WritePlan& plan) {
      for (int64_t layer = 0; layer < l.num_layers; ++layer) {
        const auto dense = [&](const std::vector<at::Tensor>& per_lane) { return dense_base(l, rows, per_lane, layer, a, b); };
        if (rows.k_scale.empty()) {
          cache.write_base(plan, layer, dense(rows.k), dense(rows.v));
        } else {
          cache.write_base_int8(plan, layer, {dense(rows.k), dense(rows.k_scale)}, {dense(rows.v), dense(rows.v_scale)});
        }
      }
    });
    a = b;
  }
}

// Residual rows of stream `r` (the sequence's residual `index`) for positions [begin, end).
void append_residual(cache::PagedKvCache& cache, SeqId seq, const SequenceRows& rows, size_t index, int64_t begin,
                     int64_t end) {
  const cache::CacheLayout& l = cache.layout();
  const SequenceRows::Residual& r = rows.residuals[index];
  for (int64_t a = begin; a < end;) {
    const int64_t b = run_end(r.writers, a, end);
    cache::AppendRequest req;
    req.writer = r.writers[static_cast<size_t>(a)];
    req.residuals.push_back({r.key, b - a});
    append_checked(cache, seq, req, [&](const cache::WritePlan& plan) {
      for (int64_t layer = 0; layer < l.num_layers; ++layer) {
        if (r.ranks[static_cast<size_t>(layer)] == 0) continue;
        cache.write_residual(plan, 0, layer, dense_residual(l, rows, r, layer, a, b));
      }
    });
    a = b;
  }
}

// After positions [begin, end) were appended to every lane: each lane keeps the rows placed
// before and the new rows at positions it held, packed in order. `placed`: per lane, saved
// rows in place so far.
void pack_chunk(cache::PagedKvCache& cache, SeqId seq, const SequenceRows& rows, int64_t begin, int64_t end,
                std::vector<int64_t>& placed) {
  cache::KeepSets keep(rows.lanes.size());
  bool packs = false;
  for (size_t lane = 0; lane < rows.lanes.size(); ++lane) {
    std::vector<int64_t>& k = keep[lane];
    for (int64_t r = 0; r < placed[lane]; ++r) k.push_back(r);
    const std::vector<int32_t>& positions = rows.lanes[lane].positions;
    const auto [first, last] = rows_between(positions, begin, end);
    for (int64_t r = first; r < last; ++r) k.push_back(placed[lane] + positions[static_cast<size_t>(r)] - begin);
    packs = packs || static_cast<int64_t>(k.size()) != placed[lane] + (end - begin);
    placed[lane] += last - first;
  }
  if (packs && !cache.compact(seq, keep)) {
    throw CapacityError("the pools cannot pack the restored rows",
                        {"", "sequence " + std::to_string(seq.value()), "", "", "raise kv_pool_bytes or close sessions"});
  }
}

// Masks the rows the saved lanes hold evicted (check_lanes: every block keeps a live row, so
// no block is dropped and the rows stay where they are).
void mask_evicted(cache::PagedKvCache& cache, SeqId seq, const SequenceRows& rows) {
  cache::KeepSets keep(rows.lanes.size());
  bool masks = false;
  for (size_t lane = 0; lane < rows.lanes.size(); ++lane) {
    const Lane& saved = rows.lanes[lane];
    for (size_t r = 0; r < saved.positions.size(); ++r) {
      if (saved.live.empty() || saved.live[r] != 0) keep[lane].push_back(static_cast<int64_t>(r));
    }
    masks = masks || keep[lane].size() != saved.positions.size();
  }
  if (masks) (void)cache.evict(seq, keep);
}

void check_lane(const cache::CacheLayout& l, const SequenceRows& rows, size_t lane) {
  const Lane& s = rows.lanes[lane];
  const std::string where = "lane " + std::to_string(lane);
  const auto n = static_cast<int64_t>(rows.tokens.size());
  const auto num_rows = static_cast<int64_t>(s.positions.size());
  for (int64_t r = 0; r < num_rows; ++r) {
    const int32_t p = s.positions[static_cast<size_t>(r)];
    if (p < 0 || p >= n || (r > 0 && p <= s.positions[static_cast<size_t>(r - 1)])) {
      refuse("positions must ascend within the " + std::to_string(n) + " tokens", where);
    }
  }
  if (!s.live.empty() && static_cast<int64_t>(s.live.size()) != num_rows) refuse("a mask of another length", where);
  if (!s.scores.empty() && static_cast<int64_t>(s.scores.size()) != num_rows) refuse("scores of another length", where);
  if (!std::all_of(s.scores.begin(), s.scores.end(), [](float x) { return std::isfinite(x); })) {
    refuse("a score that is not a finite number", where);
  }
  for (int64_t b = 0; b * l.block_size < num_rows && !s.live.empty(); ++b) {
    const auto from = s.live.begin() + b * l.block_size;
    const auto to = s.live.begin() + std::min(num_rows, (b + 1) * l.block_size);
    if (std::none_of(from, to, [](uint8_t x) { return x != 0; })) refuse("a block whose rows are all evicted", where);
  }
  const std::vector<int64_t> shape = {num_rows, l.heads_per_group, l.head_dim};
  const at::Tensor &k = rows.k[lane], &v = rows.v[lane];
  if (!k.defined() || k.sizes().vec() != shape || !v.defined() || v.sizes().vec() != shape) {
    refuse("K or V of another shape than [rows, heads_per_group, head_dim]", where);
  }
}

void check_residual(const cache::CacheLayout& l, const SequenceRows& rows, size_t index) {
  const SequenceRows::Residual& r = rows.residuals[index];
  const std::string where = "residual stream " + std::to_string(index);
  const auto covered = static_cast<int64_t>(r.writers.size());
  if (static_cast<int64_t>(r.ranks.size()) != l.num_layers || r.c.size() != rows.lanes.size() ||
      covered > static_cast<int64_t>(rows.tokens.size())) {
    refuse("ranks, lanes or writers of another number", where);
  }
  for (size_t lane = 0; lane < r.c.size(); ++lane) {
    const int64_t rank = r.ranks[static_cast<size_t>(l.layer_of(static_cast<int64_t>(lane)))];
    const std::vector<int32_t>& positions = rows.lanes[lane].positions;
    const int64_t fill = rows_between(positions, 0, covered).second;
    const at::Tensor& c = r.c[lane];
    const bool ok = rank == 0 ? !c.defined() : c.defined() && c.sizes().vec() == std::vector<int64_t>{fill, rank};
    if (!ok) {
      refuse("rows of another shape than [the lane's rows before position " + std::to_string(covered) + ", rank]",
             where + " lane " + std::to_string(lane));
    }
  }
}

}  // namespace

bool int8_scales_fit(const SequenceRows& rows, const std::function<std::vector<int64_t>(size_t)>& scale_shape) {
  const bool int8 = rows.key.dtype == cache::StorageDtype::kInt8;
  if (!int8) {
    return rows.k_scale.empty() && rows.v_scale.empty() &&
           std::all_of(rows.k.begin(), rows.k.end(), [](const at::Tensor& t) { return t.is_floating_point(); }) &&
           std::all_of(rows.v.begin(), rows.v.end(), [](const at::Tensor& t) { return t.is_floating_point(); });
  }
  if (rows.k_scale.size() != rows.k.size() || rows.v_scale.size() != rows.k.size()) return false;
  for (size_t i = 0; i < rows.k.size(); ++i) {
    const std::vector<int64_t> shape = scale_shape(i);
    for (const at::Tensor* s : {&rows.k_scale[i], &rows.v_scale[i]}) {
      if (!s->defined() || s->scalar_type() != at::kFloat || s->sizes().vec() != shape) return false;
    }
    if (rows.k[i].scalar_type() != at::kChar || rows.v[i].scalar_type() != at::kChar) return false;
  }
  return true;
}

SequenceRows export_lanes(const cache::PagedKvCache& cache, SeqId seq, const std::vector<int32_t>& context_tokens) {
  const cache::CacheManager& m = cache.manager();
  const cache::SequenceState& st = m.sequence(seq);
  LORAKV_ASSERT(st.first_position == 0, "exporting private rows lane by lane");
  LORAKV_ASSERT(st.num_positions <= static_cast<int64_t>(context_tokens.size()),
                "sequence " << seq.value() << " holds " << st.num_positions << " positions of a " << context_tokens.size()
                            << "-token context");
  SequenceRows rows;
  rows.key = st.base_key;
  // An evicted sequence keeps no token list (cache_manager.h): its positions are the context's first ones.
  rows.tokens.assign(context_tokens.begin(), context_tokens.begin() + st.num_positions);
  rows.writers = st.writers.expand();
  const int64_t lanes = cache.layout().num_lanes();
  for (int64_t lane = 0; lane < lanes; ++lane) {
    const cache::BaseLane& l = st.lanes[static_cast<size_t>(lane)];
    const at::Tensor slots = long_tensor(m.base_slots(seq, lane));
    if (st.base_key.dtype == cache::StorageDtype::kInt8) {  // as stored, scales beside
      const cache::Int8Rows k = cache.pool(0).gather_a_int8(slots), v = cache.pool(0).gather_b_int8(slots);
      rows.k.push_back(k.values);
      rows.k_scale.push_back(k.scales);
      rows.v.push_back(v.values);
      rows.v_scale.push_back(v.scales);
    } else {
      rows.k.push_back(cache.pool(0).gather_a(slots));  // [rows, heads_per_group, head_dim]
      rows.v.push_back(cache.pool(0).gather_b(slots));
    }
    rows.lanes.push_back({l.positions, l.live, l.scores});
  }
  for (const cache::ResidualStream& r : st.residuals) {
    SequenceRows::Residual out{r.key, r.ranks, r.writers.expand(), {}};
    for (int64_t lane = 0; lane < lanes; ++lane) {
      const int32_t pool = r.pools[static_cast<size_t>(cache.layout().layer_of(lane))];
      out.c.push_back(pool < 0 ? at::Tensor() : cache.pool(pool).gather_a(long_tensor(m.residual_slots(seq, r.key, lane))));
    }
    rows.residuals.push_back(std::move(out));
  }
  return rows;
}

void check_lanes(const cache::CacheLayout& l, const SequenceRows& rows) {
  if (static_cast<int64_t>(rows.lanes.size()) != l.num_lanes() || rows.k.size() != rows.lanes.size() ||
      rows.v.size() != rows.lanes.size() || rows.writers.size() != rows.tokens.size()) {
    refuse("lanes, K, V or writers of another number than the layout's " + std::to_string(l.num_lanes()) + " lanes",
           "rows");
  }
  for (size_t lane = 0; lane < rows.lanes.size(); ++lane) check_lane(l, rows, lane);
  if (!int8_scales_fit(rows, [&](size_t i) { return std::vector<int64_t>{rows.k[i].size(0), l.heads_per_group}; })) {
    refuse("K or V of another dtype than the rows' key, or int8 scales missing or of another shape", "rows");
  }
  for (size_t j = 0; j < rows.residuals.size(); ++j) check_residual(l, rows, j);
}

void import_lanes(cache::PagedKvCache& cache, SeqId seq, const SequenceRows& rows, int64_t chunk) {
  const auto n = static_cast<int64_t>(rows.tokens.size());
  cache.create_sequence(seq, rows.key);
  // A sequence without rows adopts no residual rows, whatever the filter.
  for (const SequenceRows::Residual& r : rows.residuals) (void)cache.attach_residual(seq, r.key, r.ranks, {});
  std::vector<int64_t> placed(rows.lanes.size(), 0);
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t end = std::min(n, begin + chunk);
    append_base(cache, seq, rows, begin, end);
    for (size_t j = 0; j < rows.residuals.size(); ++j) {
      append_residual(cache, seq, rows, j, begin, std::min(end, static_cast<int64_t>(rows.residuals[j].writers.size())));
    }
    pack_chunk(cache, seq, rows, begin, end, placed);
  }
  mask_evicted(cache, seq, rows);
  for (size_t lane = 0; lane < rows.lanes.size(); ++lane) {
    const Lane& saved = rows.lanes[lane];
    LORAKV_ASSERT(cache.manager().sequence(seq).lanes[lane].positions == saved.positions,
                  "restored lane " << lane << " holds other positions");
    if (!saved.scores.empty()) {
      cache.add_scores(seq, static_cast<int64_t>(lane), saved.scores.data(), static_cast<int64_t>(saved.scores.size()));
    }
  }
}

}  // namespace lorakv::runtime

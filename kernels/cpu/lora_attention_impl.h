// kernels/cpu/lora_attention_impl.h: the fused base + low-rank attention over paged rows,
// written once over a vector type V (see lora_attention_ops.h for why it is a template over
// an internal-linkage type). Per work item (base or agent, KV head, key range):
//   for each tile of kTileKeys rows: load K, V, positions once (bfloat16 -> float32, keys
//     stored before RoPE rotated, K transposed for the score loop), then for every agent
//     whose queries read it: its keys (K-LoRA: base + RoPE(C_k B_k), expanded and rotated
//     here, never stored), scores of 4 query rows at a time, causal/window mask by stored
//     position, online-softmax update of the row's two accumulators P.V (head_dim wide) and
//     P.C_v (rank wide), rescaled together.
// merge_rows then combines an agent's partial records over the items of its KV head
// (split-K), runs the epilogue out = (P.V + (P.C) B_v) / l and writes out and lse.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "lorakv/kernels/cpu/lora_attention_ops.h"

namespace lorakv::kernels::cpu {

template <class V>
struct FusedAttention {
  using O = Ops<V>;
  using R = typename V::R;
  static constexpr int64_t T = kTileKeys;
  static constexpr int64_t kScoreRows = 4;  // query rows per score register block
  static constexpr int32_t kHiddenPosition = INT32_MAX;  // above every query: masked

  struct Scratch {
    float* k_conv;    // [T][dim] base keys as float32 (bfloat16 storage)
    float* k_rot;     // [T][dim] base keys rotated (stored before RoPE)
    float* kt_base;   // [dim][T]
    float* k_agent;   // [T][dim] one agent's keys (K-LoRA)
    float* kt_agent;  // [dim][T]
    float* v_conv;    // [T][dim] base values as float32 (bfloat16 storage)
    float* cv;        // [T][rank_pad] C_v tile
    float* ck;        // [T][rank_pad] C_k tile
    float* s;         // scores, then probabilities: [kBlockRows][T], or wide [T][rows_pad]
    float* qpos;      // [wide_rows(kBlockRows)] a wide block's query positions
    float* q;         // [item rows][dim] queries, float32, times the softmax scale
    float* qt;        // [dim][qt_stride] the same transposed (the wide path)
    int32_t* qt16;    // integer QK: [dim / 2][qt_stride] int16 pairs, in qt's place
    float* q_scale;   // integer QK: [qt_stride] each row's int16 scale (0 past the item's rows)
    int16_t* k16;     // integer QK: [T][dim] the tile's int8 keys as int16
    int64_t qt_stride;
  };

  static Scratch carve(float* base, int64_t dim, int64_t max_rows) {
    float* p = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(base) + 63) & ~uintptr_t{63});
    const int64_t tile = T * dim, rank_tile = T * round_up(kMaxLoraAttentionRank, 16);
    Scratch s;
    s.k_conv = p;
    s.k_rot = s.k_conv + tile;
    s.kt_base = s.k_rot + tile;
    s.k_agent = s.kt_base + tile;
    s.kt_agent = s.k_agent + tile;
    s.v_conv = s.kt_agent + tile;
    s.cv = s.v_conv + tile;
    s.ck = s.cv + rank_tile;
    s.s = s.ck + rank_tile;
    s.qpos = s.s + T * wide_rows(kBlockRows);
    s.q = s.qpos + wide_rows(kBlockRows);
    s.qt = s.q + max_rows * dim;
    s.qt_stride = wide_rows(max_rows);
    s.qt16 = reinterpret_cast<int32_t*>(s.qt);  // an integer item's wide blocks read only these
    s.q_scale = s.qt + s.qt_stride * dim;
    s.k16 = reinterpret_cast<int16_t*>(s.q_scale + s.qt_stride);
    return s;
  }

  // An item's views, resolved once.
  struct Item {
    const LoraAttentionParams& p;
    const Plan& plan;
    WorkItem& w;
    const PagedStorage& st;
    LaneRows lane;
    int64_t lane_index, head_in_lane, kv_head, dim, group;
    int64_t agent_begin, agent_end;
    bool shared;

    // Rows stored Hadamard-rotated (PagedStorage::hadamard): keys after RoPE stay in that
    // frame and the queries join it; keys before RoPE go back to their own frame as they load
    // (RoPE needs it), and the queries stay in theirs.
    bool queries_rotated() const { return st.hadamard && !st.keys_before_rope; }
    // The path's integer QK form on int8 rows whose keys are read as stored (after RoPE):
    // the item's queries are rounded to int16 per row (every block, so an agent's scores do
    // not depend on the blocks it falls in), and wide blocks score with int16 dot products.
    bool integer_qk() const { return V::kIntDot && st.dtype == ElementType::kInt8 && !st.keys_before_rope; }
    bool keys_unrotated_on_load() const { return st.hadamard && st.keys_before_rope; }

    // Row offset of agent a's rows among the item's rows (queries, raw scores).
    int64_t row_offset(int64_t a) const { return shared ? plan.agent_rows[a].row_offset : 0; }
    float* record(int64_t a, int64_t r) const {
      const AgentRows& ar = plan.agent_rows[a];
      return w.partial + (shared ? ar.offset : 0) + r * ar.record_floats;
    }
    int64_t rows_before_end() const {
      const AgentRows& last = plan.agent_rows[agent_end - 1];
      return row_offset(agent_end - 1) + last.num_rows;
    }
  };

  static Item resolve(const Plan& plan, WorkItem& w) {
    const LoraAttentionParams& p = *plan.params;
    const SharedBase& base = p.bases[w.base];
    const bool shared = w.agent < 0;
    const PagedRows& rows = shared ? base.rows : p.agents[w.agent].private_rows;
    const int64_t lane_index = w.kv_head / rows.heads_per_lane;
    const int64_t begin = shared ? base.first_agent : w.agent;
    const int64_t end = shared ? base.first_agent + base.num_agents : w.agent + 1;
    return Item{p,         plan,        w, *rows.storage, rows.lanes[lane_index], lane_index, w.kv_head % rows.heads_per_lane,
                w.kv_head, p.head_dim, plan.group_size, begin, end, shared};
  }

  struct Tile {
    int64_t row0 = 0, n = 0, keys_pad = 0;
    int64_t min_pos = 0, max_pos = 0;
    const float* k[T];
    const float* v[T];
    int32_t pos[T];
    int32_t rope[T];
    const float* kt_base = nullptr;  // built on first use
    bool k_rotated = false;          // keys before RoPE: rotated into k_rot (first use)
    const int8_t* k8[T];             // int8 storage: the keys as stored, and their scales
    float k_scale[T];
    bool k16_ready = false;          // integer QK: k8 widened into Scratch::k16 (first use)
    bool k_float = true;             // k holds the keys as float32 (integer QK: on first use)
  };

  struct RowPtrs {
    const float* const* rows;
    const float* operator()(int64_t j) const { return rows[j]; }
  };
  struct Strided {
    const float* base;
    int64_t stride;
    const float* operator()(int64_t j) const { return base + j * stride; }
  };
  // The tile's int8 keys for integer QK, widened to int16 rows on first use.
  struct IntKeys {
    Tile* t;
    const Scratch* sc;
    int64_t dim;
    const int16_t* operator()(int64_t j) const { return sc->k16 + j * dim; }
    void widen() const {
      if (t->k16_ready) return;
      for (int64_t j = 0; j < t->n; ++j) {
        for (int64_t d = 0; d < dim; ++d) sc->k16[j * dim + d] = t->k8[j][d];
      }
      t->k16_ready = true;
    }
  };

  // Rows row0..row0+n of the item's lane: pointers to float32 keys and values (converted
  // into scratch for bfloat16, and for int8 times the row's scale), positions. Returns the
  // bytes read.
  static int64_t load_tile(const Item& it, int64_t row0, int64_t n, bool need_v, const Scratch& sc, Tile& t) {
    const PagedStorage& st = it.st;
    const int64_t dim = it.dim, bs = st.block_size;
    const bool f32 = st.dtype == ElementType::kFloat32, i8 = st.dtype == ElementType::kInt8;
    t.row0 = row0;
    t.n = n;
    t.keys_pad = round_up(n, V::kScoreRegs * V::kW);
    t.kt_base = nullptr;
    t.k_rotated = false;
    t.k16_ready = false;
    // Float keys on load unless wide blocks may score the tile as integers (an item of fewer
    // rows has only narrow blocks, which read float keys anyway).
    t.k_float = !(it.integer_qk() && kWide && it.rows_before_end() >= kWideMinRows);
    int64_t lo = 0, hi = 0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = row0 + j;
      const int64_t block = it.lane.blocks[i / bs], r = i % bs, slot = block * bs + r;
      const int64_t off = block * st.block_stride + r * st.row_stride + it.head_in_lane * st.head_stride;
      const int32_t stored = st.positions[slot];
      // An evicted row takes a position no query reaches, so the causal mask hides it.
      t.pos[j] = it.lane.live && !it.lane.live[i] ? kHiddenPosition : stored;
      t.rope[j] = it.lane.rope_from_row >= 0 ? static_cast<int32_t>(it.lane.rope_from_row + i)
                  : st.rope_positions        ? st.rope_positions[slot]
                                             : stored;
      lo = j == 0 || t.pos[j] < lo ? t.pos[j] : lo;
      hi = j == 0 || t.pos[j] > hi ? t.pos[j] : hi;
      if (f32) {
        t.k[j] = static_cast<const float*>(st.k) + off;
        if (need_v) t.v[j] = static_cast<const float*>(st.v) + off;
      } else {
        const int64_t scale_at = slot * st.scale_row_stride + it.head_in_lane;
        if (i8) {
          t.k8[j] = static_cast<const int8_t*>(st.k) + off;
          t.k_scale[j] = st.k_scales[scale_at];
        }
        if (t.k_float) {  // integer QK: float keys only if something asks (float_keys)
          O::load_row(st.k, st.dtype, off, dim, i8 ? st.k_scales[scale_at] : 1.f, sc.k_conv + j * dim);
          if (it.keys_unrotated_on_load()) O::hadamard_row(sc.k_conv + j * dim, dim);
          t.k[j] = sc.k_conv + j * dim;
        }
        if (need_v) {
          O::load_row(st.v, st.dtype, off, dim, i8 ? st.v_scales[scale_at] : 1.f, sc.v_conv + j * dim);
          t.v[j] = sc.v_conv + j * dim;
        }
      }
    }
    t.min_pos = lo;
    t.max_pos = hi;
    const int64_t row_bytes = dim * element_bytes(st.dtype) + (i8 ? 4 : 0);  // an int8 row carries its scale
    return n * ((need_v ? 2 : 1) * row_bytes + 4 + (st.rope_positions ? 4 : 0));
  }

  // Asks for the next tile's K and V rows while this one is computed: rows of one KV head
  // are short runs (head_dim values) a row stride apart, which the hardware prefetchers
  // follow poorly, so a tile otherwise waits on memory row by row.
  static void prefetch_tile(const Item& it, int64_t row0, int64_t n) {
    const PagedStorage& st = it.st;
    const int64_t bs = st.block_size, elem = element_bytes(st.dtype);
    const int64_t row_bytes = it.dim * elem;
    const char* k = static_cast<const char*>(st.k);
    const char* v = static_cast<const char*>(st.v);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = row0 + j;
      const int64_t off = (it.lane.blocks[i / bs] * st.block_stride + i % bs * st.row_stride + it.head_in_lane * st.head_stride) * elem;
      for (int64_t b = 0; b < row_bytes; b += 64) {
        __builtin_prefetch(k + off + b, 0, 2);
        __builtin_prefetch(v + off + b, 0, 2);
      }
    }
  }

  static const float* cos_row(const Item& it, int32_t pos) { return it.p.rope_cos + pos * (it.dim / 2); }
  static const float* sin_row(const Item& it, int32_t pos) { return it.p.rope_sin + pos * (it.dim / 2); }

  // Integer QK loads only the int8 keys; the float32 ones (int8 times scale) are made here
  // when something else reads them (narrow blocks, K-LoRA, key deltas, the mass pass).
  static void float_keys(const Item& it, const Scratch& sc, Tile& t) {
    if (t.k_float) return;
    for (int64_t j = 0; j < t.n; ++j) {
      O::load_row(t.k8[j], ElementType::kInt8, 0, it.dim, t.k_scale[j], sc.k_conv + j * it.dim);
      t.k[j] = sc.k_conv + j * it.dim;
    }
    t.k_float = true;
  }

  // Keys stored before RoPE: the tile's keys rotated, rows [T][dim] in k_rot (once per tile).
  static const float* rotated_keys(const Item& it, const Scratch& sc, Tile& t) {
    if (t.k_rotated) return sc.k_rot;
    float_keys(it, sc, t);
    for (int64_t j = 0; j < t.n; ++j) {
      float* x = sc.k_rot + j * it.dim;
      std::memcpy(x, t.k[j], sizeof(float) * it.dim);
      O::rotate(x, it.dim, cos_row(it, t.rope[j]), sin_row(it, t.rope[j]));
    }
    t.k_rotated = true;
    return sc.k_rot;
  }

  // The base keys of the tile, transposed ([dim][T]), rotated first when stored before RoPE.
  static const float* base_keys(const Item& it, const Scratch& sc, Tile& t) {
    if (t.kt_base) return t.kt_base;
    float_keys(it, sc, t);
    if (!it.st.keys_before_rope) {
      O::transpose(RowPtrs{t.k}, t.n, it.dim, sc.kt_base);
    } else {
      O::transpose(Strided{rotated_keys(it, sc, t), it.dim}, t.n, it.dim, sc.kt_base);
    }
    t.kt_base = sc.kt_base;
    return t.kt_base;
  }

  // Residual rows row0..row0+n of `stream` for the item's lane into dst [n][rank_pad].
  static int64_t load_residual(const Item& it, const LowRankStream& stream, const Tile& t, float* dst) {
    const PagedStorage& st = *stream.c_storage;
    const LaneRows& lane = stream.c_lanes[it.lane_index];
    const int64_t rank = stream.rank, rank_pad = round_up(rank, 16), bs = st.block_size;
    for (int64_t j = 0; j < t.n; ++j) {
      const int64_t i = t.row0 + j;
      const int64_t block = lane.blocks[i / bs], r = i % bs;
      const int64_t off = block * st.block_stride + r * st.row_stride + it.head_in_lane * st.head_stride;
      O::load_row_padded(st.k, st.dtype, off, rank, rank_pad, dst + j * rank_pad);
    }
    return t.n * rank * (st.dtype == ElementType::kFloat32 ? 4 : 2);
  }

  // Agent a's keys of the tile, transposed: the base keys, or with K-LoRA base + RoPE(C_k B_k)
  // at each row's rope position, expanded per tile on chip.
  static const float* agent_keys(const Item& it, int64_t a, const Scratch& sc, Tile& t, int64_t* residual_bytes) {
    const LowRankStream& ks = it.p.agents[a].k;
    float_keys(it, sc, t);
    if (it.shared && it.p.agents[a].k_delta.storage) return delta_keys(it, it.p.agents[a].k_delta, sc, t, residual_bytes);
    if (!it.shared || ks.rank == 0) return base_keys(it, sc, t);
    *residual_bytes += load_residual(it, ks, t, sc.ck);
    const int64_t dim = it.dim, rank_pad = round_up(ks.rank, 16);
    const float* b = ks.b + it.kv_head * ks.b_head_stride;
    const bool before_rope = it.st.keys_before_rope, rotated = it.queries_rotated();
    O::expand(sc.k_agent, t.n, dim, sc.ck, rank_pad, Strided{b, ks.b_rank_stride}, ks.rank);
    for (int64_t j = 0; j < t.n; ++j) {
      float* x = sc.k_agent + j * dim;
      if (before_rope) O::add_into(x, t.k[j], dim);
      O::rotate(x, dim, cos_row(it, t.rope[j]), sin_row(it, t.rope[j]));
      if (!before_rope && !rotated) O::add_into(x, t.k[j], dim);
    }
    O::transpose(Strided{sc.k_agent, dim}, t.n, dim, sc.kt_agent);
    if (rotated) add_rotated_to_base(it, sc, t);  // base keys stay in the Hadamard frame: the delta joins them
    return sc.kt_agent;
  }

  // kt_agent = H kt_agent + the tile's base keys (both transposed, in the Hadamard frame).
  static void add_rotated_to_base(const Item& it, const Scratch& sc, Tile& t) {
    O::hadamard_columns(sc.kt_agent, it.dim, t.keys_pad);
    const float* base = base_keys(it, sc, t);
    for (int64_t d = 0; d < it.dim; ++d) O::add_into(sc.kt_agent + d * kTileKeys, base + d * kTileKeys, t.keys_pad);
  }

  // Agent keys from stored full-width deltas: base + delta (rotated after the sum when keys
  // are stored before RoPE), transposed.
  static const float* delta_keys(const Item& it, const KeyDelta& kd, const Scratch& sc, Tile& t, int64_t* residual_bytes) {
    const PagedStorage& st = *kd.storage;
    const LaneRows& lane = kd.lanes[it.lane_index];
    const int64_t dim = it.dim, bs = st.block_size;
    for (int64_t j = 0; j < t.n; ++j) {
      const int64_t i = t.row0 + j;
      const int64_t off = lane.blocks[i / bs] * st.block_stride + i % bs * st.row_stride + it.head_in_lane * st.head_stride;
      float* x = sc.k_agent + j * dim;
      O::load_row(st.k, st.dtype, off, dim, 1.f, x);
      if (!it.queries_rotated()) O::add_into(x, t.k[j], dim);
      if (it.st.keys_before_rope) O::rotate(x, dim, cos_row(it, t.rope[j]), sin_row(it, t.rope[j]));
    }
    *residual_bytes += t.n * dim * (st.dtype == ElementType::kFloat32 ? 4 : 2);
    O::transpose(Strided{sc.k_agent, dim}, t.n, dim, sc.kt_agent);
    if (it.queries_rotated()) add_rotated_to_base(it, sc, t);
    return sc.kt_agent;
  }

  static bool visible(int64_t q_pos, int64_t k_pos, int64_t window) {
    return k_pos <= q_pos && (window <= 0 || q_pos - k_pos < window);
  }

  // Whether any of agent a's queries can see a row of the tile (a sufficient test to skip).
  static bool agent_reads_tile(const Item& it, int64_t a, const Tile& t) {
    const AgentAttention& ag = it.p.agents[a];
    for (int64_t q = 0; q < ag.num_queries; ++q) {
      const int64_t qp = ag.q_positions[q];
      if (qp >= t.min_pos && (it.p.window <= 0 || qp - t.max_pos < it.p.window)) return true;
    }
    return false;
  }

  // -inf for keys the query at q_pos does not see and for the padding past n.
  static void mask_row(float* s, const Tile& t, int64_t q_pos, int64_t window) {
    for (int64_t j = t.n; j < t.keys_pad; ++j) s[j] = O::neg_inf();
    if (q_pos >= t.max_pos && (window <= 0 || q_pos - t.min_pos < window)) return;
    for (int64_t j = 0; j < t.n; ++j) {
      if (!visible(q_pos, t.pos[j], window)) s[j] = O::neg_inf();
    }
  }

  // Online softmax, first half: the row's new max and sum from one tile's masked scores,
  // which become probabilities in place. Returns false (record untouched) when the row sees
  // no key of the tile; else the factor the accumulators are rescaled by.
  static bool softmax_step(float* rec, float* s, const Tile& t, float* alpha) {
    const float tile_max = O::row_max(s, t.keys_pad);
    if (tile_max == O::neg_inf()) return false;
    const float m = rec[0];
    const float m_new = O::fmax(m, tile_max);
    *alpha = m == O::neg_inf() ? 0.f : expf(m - m_new);
    const float sum = O::exp_shift_sum(s, t.keys_pad, m_new);
    rec[0] = m_new;
    rec[1] = rec[1] * *alpha + sum;
    return true;
  }

  // Up to kBlockRows consecutive query rows of the item (rows of several agents and heads:
  // an agent's rows follow the previous agent's) that read the tile with the same keys: the
  // base keys for every agent of a shared item but those with keys of their own (K-LoRA,
  // stored key deltas), which form blocks alone. The products against the tile run over the
  // block's rows together, so each key, value and C row is loaded once for all its agents
  // and heads. Blocks of at least kWideMinRows rows take the wide path (vector paths): scores
  // computed transposed, keys by rows in vector lanes, S^T = K Q^T, so the key tile is never
  // transposed and the online softmax runs down the keys for a register of rows at once (no
  // horizontal max or sum); smaller blocks score kScoreRows rows against the transposed tile.
  struct Block {
    int64_t first = 0, rows = 0;   // item rows [first, first + rows)
    int64_t agent[kBlockRows];     // each row's agent
    int64_t row_in_agent[kBlockRows];
    float* recs[kBlockRows];
    const float* probs[kBlockRows];  // row r's probability of key j at probs[r][j * p_stride]
    int64_t p_stride = 1;
    float alpha[kBlockRows];
  };
  static constexpr bool kWide = V::kW >= 8;
  static constexpr int64_t kWideMinRows = 8;

  // Whether agent a reads a shared tile with keys of its own rather than the base keys.
  static bool own_keys(const Item& it, int64_t a) {
    const AgentAttention& ag = it.p.agents[a];
    return it.shared && (ag.k.rank > 0 || ag.k_delta.storage);
  }

  // Whether two residual streams hold the same rows for the tile (agents of a shared-A group
  // each point at the group's C with their own B): same pool, rank and block ids.
  static bool same_residual_rows(const Item& it, const LowRankStream& x, const LowRankStream& y, const Tile& t) {
    const PagedStorage& a = *x.c_storage;
    const PagedStorage& b = *y.c_storage;
    if (x.rank != y.rank || a.k != b.k || a.dtype != b.dtype || a.block_size != b.block_size ||
        a.block_stride != b.block_stride || a.row_stride != b.row_stride || a.head_stride != b.head_stride) {
      return false;
    }
    const LaneRows& la = x.c_lanes[it.lane_index];
    const LaneRows& lb = y.c_lanes[it.lane_index];
    if (la.blocks == lb.blocks) return true;
    const int64_t first = t.row0 / a.block_size, last = (t.row0 + t.n - 1) / a.block_size;
    return std::memcmp(la.blocks + first, lb.blocks + first, sizeof(int32_t) * (last - first + 1)) == 0;
  }

  // Scores of the block's rows against kt (kScoreRows rows per register block, across
  // agents), masks, raw scores, and each row's online-softmax step (probabilities in place).
  // A row that sees no key of the tile gets probabilities 0 and factor 1, which leaves its
  // record as it was. Returns whether any row saw a key.
  static bool block_softmax(const Item& it, const float* kt, const Scratch& sc, const Tile& t, Block& b) {
    for (int64_t r0 = 0; r0 < b.rows; r0 += kScoreRows) {
      const int64_t rows = b.rows - r0 < kScoreRows ? b.rows - r0 : kScoreRows;
      O::scores(sc.q + (b.first + r0) * it.dim, rows, kt, it.dim, t.keys_pad, sc.s + r0 * T);
    }
    const int64_t keys_in_item = it.w.row_end - it.w.row_begin;
    bool any = false;
    b.p_stride = 1;
    for (int64_t row = 0; row < b.rows; ++row) {
      const int64_t a = b.agent[row], r = b.row_in_agent[row];
      float* s = sc.s + row * T;
      mask_row(s, t, it.p.agents[a].q_positions[r / it.group], it.p.window);
      if (it.w.raw_scores) {
        std::memcpy(it.w.raw_scores + (b.first + row) * keys_in_item + (t.row0 - it.w.row_begin), s, sizeof(float) * t.n);
      }
      b.recs[row] = it.record(a, r);
      b.probs[row] = s;
      if (softmax_step(b.recs[row], s, t, &b.alpha[row])) {
        any = true;
      } else {
        std::memset(s, 0, sizeof(float) * t.n);
        b.alpha[row] = 1.f;
      }
    }
    return any;
  }

  // The wide path's softmax step for the block (see Block): S^T [keys][rows_pad] in sc.s,
  // masked by position, then per register of rows the tile's max down the keys, the rescale
  // factor, the probabilities in place and the new sum, each row's m and l back into its record.
  template <class Keys>
  static void wide_softmax(const Item& it, const Keys& keys, const Scratch& sc, const Tile& t, Block& b) {
    constexpr int64_t W = V::kW;
    const int64_t nv = (b.rows + W - 1) / W, rp = nv * W;
    float* st = sc.s;
    if constexpr (std::is_same_v<Keys, IntKeys>) {
      if constexpr (V::kIntDot) {  // else never reached: integer_qk() needs it
        keys.widen();
        O::scores_t_int(keys, t.k_scale, t.n, it.dim, sc.qt16 + b.first, sc.qt_stride, sc.q_scale + b.first, nv, st, rp);
      }
    } else {
      O::scores_t(keys, t.n, it.dim, sc.qt + b.first, sc.qt_stride, nv, st, rp);
    }
    bool masked = false;
    for (int64_t row = 0; row < rp; ++row) {
      const int64_t r = row < b.rows ? row : 0;  // lanes past the block repeat its first row
      const int64_t q = it.p.agents[b.agent[r]].q_positions[b.row_in_agent[r] / it.group];
      sc.qpos[row] = static_cast<float>(q);  // exact: positions are far below 2^24
      masked = masked || q < t.max_pos || (it.p.window > 0 && q - t.min_pos >= it.p.window);
    }
    if (masked) {
      const R window = V::set1(static_cast<float>(it.p.window - 1));
      for (int64_t j = 0; j < t.n; ++j) {
        const R key = V::set1(static_cast<float>(t.pos[j]));
        for (int64_t v = 0; v < nv; ++v) {
          const R q = V::load(sc.qpos + v * W);
          R x = V::keep_if_ge(V::load(st + j * rp + v * W), q, key);
          if (it.p.window > 0) x = V::keep_if_ge(x, window, V::sub(q, key));
          V::store(st + j * rp + v * W, x);
        }
      }
    }
    if (it.w.raw_scores) {
      const int64_t keys_in_item = it.w.row_end - it.w.row_begin;
      for (int64_t row = 0; row < b.rows; ++row) {
        float* raw = it.w.raw_scores + (b.first + row) * keys_in_item + (t.row0 - it.w.row_begin);
        for (int64_t j = 0; j < t.n; ++j) raw[j] = st[j * rp + row];
      }
    }
    alignas(64) float m[W], l[W], alpha[W];
    for (int64_t v = 0; v < nv; ++v) {
      for (int64_t i = 0; i < W; ++i) {
        const int64_t row = v * W + i;
        if (row < b.rows) b.recs[row] = it.record(b.agent[row], b.row_in_agent[row]);
        m[i] = row < b.rows ? b.recs[row][0] : O::neg_inf();
        l[i] = row < b.rows ? b.recs[row][1] : 0.f;
      }
      R tile_max = V::set1(O::neg_inf());
      for (int64_t j = 0; j < t.n; ++j) tile_max = V::max(tile_max, V::load(st + j * rp + v * W));
      const R m_old = V::load(m), m_new = V::max(m_old, tile_max);
      // A row that has seen no key keeps m = -inf; shifting by -FLT_MAX instead gives it
      // probabilities and a factor of 0 (its sums are 0), not NaN.
      const R shift = V::max(m_new, V::set1(-3.4028235e38f));
      const R a = V::exp(V::sub(m_old, shift));
      R sum = V::zero();
      for (int64_t j = 0; j < t.n; ++j) {
        const R e = V::exp(V::sub(V::load(st + j * rp + v * W), shift));
        V::store(st + j * rp + v * W, e);
        sum = V::add(sum, e);
      }
      V::store(m, m_new);
      V::store(l, V::fma(a, V::load(l), sum));
      V::store(alpha, a);
      for (int64_t i = 0; i < W && v * W + i < b.rows; ++i) {
        const int64_t row = v * W + i;
        b.recs[row][0] = m[i];
        b.recs[row][1] = l[i];
        b.alpha[row] = alpha[i];
        b.probs[row] = st + row;
      }
    }
    b.p_stride = rp;
  }

  // acc = alpha acc + P.X over block rows [first, last) for X the tile's rows `x`, width wide
  // at `offset` floats into each record, four rows at a time (each X row loaded once per four).
  template <class Rows>
  static void block_axpy(Block& b, int64_t first, int64_t last, int64_t offset, int64_t width, const Rows& x,
                         int64_t n) {
    float* acc[4];
    for (int64_t r0 = first; r0 < last; r0 += 4) {
      const int64_t rows = last - r0 < 4 ? last - r0 : 4;
      for (int64_t r = 0; r < rows; ++r) acc[r] = b.recs[r0 + r] + offset;
      O::axpy_multi(acc, b.alpha + r0, b.probs + r0, rows, width, x, n, b.p_stride);
    }
  }

  // acc_v = alpha acc_v + P.V for the block's rows; then acc_c = alpha acc_c + P.C_v for the
  // rows of agents with a v residual, the C tile loaded once for consecutive rows whose
  // agents read the same C rows (a shared-A group).
  static void block_accumulate(const Item& it, const Scratch& sc, const Tile& t, Block& b) {
    block_axpy(b, 0, b.rows, kRecordHeader, it.dim, RowPtrs{t.v}, t.n);
    if (!it.shared) return;  // private rows carry no residual
    const LowRankStream* loaded = nullptr;
    for (int64_t first = 0; first < b.rows;) {
      const LowRankStream& v = it.p.agents[b.agent[first]].v;
      int64_t last = first + 1;
      while (last < b.rows && (b.agent[last] == b.agent[first] ||
                               (it.p.agents[b.agent[last]].v.rank > 0 && v.rank > 0 &&
                                same_residual_rows(it, v, it.p.agents[b.agent[last]].v, t)))) {
        ++last;
      }
      if (v.rank > 0) {
        if (!loaded || !same_residual_rows(it, *loaded, v, t)) {
          it.w.residual_bytes += load_residual(it, v, t, sc.cv);
          loaded = &v;
        }
        const int64_t rank_pad = round_up(v.rank, 16);
        block_axpy(b, first, last, kRecordHeader + it.dim, rank_pad, Strided{sc.cv, rank_pad}, t.n);
      }
      first = last;
    }
  }

  // Agents [begin, end) of the item against the tile with keys kt, in blocks of up to
  // kBlockRows of their rows (consecutive item rows); an agent that sees no row of the tile
  // is left out, and ends a block.
  // kt: the keys transposed, for narrow blocks; keys: the same as rows, for wide ones (the
  // base keys only: agents with keys of their own go narrow).
  template <class Keys>
  static void attend_agents(const Item& it, int64_t begin, int64_t end, const float* kt, const Keys* keys,
                            const Scratch& sc, Tile& t) {
    Block b;
    auto run_block = [&]() {
      if (b.rows == 0) return;
      bool wide = false;
      if constexpr (kWide) {
        wide = keys && b.rows >= kWideMinRows;
        if (wide) wide_softmax(it, *keys, sc, t, b);
      }
      if (wide || block_softmax(it, kt ? kt : base_keys(it, sc, t), sc, t, b)) block_accumulate(it, sc, t, b);
      b.rows = 0;
    };
    for (int64_t a = begin; a < end; ++a) {
      if (!agent_reads_tile(it, a, t)) {
        run_block();
        continue;
      }
      const int64_t n = it.plan.agent_rows[a].num_rows;
      for (int64_t r = 0; r < n; ++r) {
        if (b.rows == 0) b.first = it.row_offset(a) + r;
        b.agent[b.rows] = a;
        b.row_in_agent[b.rows] = r;
        if (++b.rows == kBlockRows) run_block();
      }
    }
    run_block();
  }

  static void load_queries(const Item& it, const Scratch& sc) {
    for (int64_t a = it.agent_begin; a < it.agent_end; ++a) {
      const AgentAttention& ag = it.p.agents[a];
      float* dst = sc.q + it.row_offset(a) * it.dim;
      for (int64_t q = 0; q < ag.num_queries; ++q) {
        for (int64_t g = 0; g < it.group; ++g) {
          const int64_t head = it.kv_head * it.group + g;
          float* row = dst + (q * it.group + g) * it.dim;
          O::load_row(ag.q, ag.q_dtype, q * ag.q_row_stride + head * ag.q_head_stride, it.dim, it.p.scale, row);
          if (it.queries_rotated()) O::hadamard_row(row, it.dim);  // H q . H k = q . k
          if (it.integer_qk()) sc.q_scale[it.row_offset(a) + q * it.group + g] = round_to_int16(row, it.dim);
        }
      }
    }
  }

  // The item's queries transposed for the wide path: qt[d * qt_stride + row], rows past the
  // item's zero.
  static void transpose_queries(const Item& it, const Scratch& sc) {
    const int64_t rows = it.rows_before_end();
    if (it.integer_qk()) return int16_pairs(it, sc, rows);
    for (int64_t d = 0; d < it.dim; ++d) {
      float* dst = sc.qt + d * sc.qt_stride;
      for (int64_t r = 0; r < rows; ++r) dst[r] = sc.q[r * it.dim + d];
      for (int64_t r = rows; r < sc.qt_stride; ++r) dst[r] = 0.f;
    }
  }

  // Rounds row x to int16 steps of its largest magnitude / 32767 (round half to even), in
  // place, and returns the step (0 for a zero row).
  static float round_to_int16(float* x, int64_t dim) {
    float largest = 0.f;
    for (int64_t d = 0; d < dim; ++d) largest = O::fmax(largest, fabsf(x[d]));
    if (largest == 0.f) return 0.f;
    const float inv = 32767.f / largest, step = largest / 32767.f;
    for (int64_t d = 0; d < dim; ++d) x[d] = nearbyintf(x[d] * inv) * step;
    return step;
  }

  // Integer QK: the item's rounded queries as int16 pairs, qt16[p * qt_stride + r] holding
  // row r's elements 2p (low half) and 2p + 1, and zero rows and scales past the item's.
  static void int16_pairs(const Item& it, const Scratch& sc, int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = sc.q + r * it.dim;
      const float step = sc.q_scale[r];
      for (int64_t p = 0; p < it.dim / 2; ++p) {
        // x is a whole number of steps: dividing recovers it exactly (|x / step| < 2^15).
        const int32_t lo = step == 0.f ? 0 : static_cast<int32_t>(nearbyintf(x[2 * p] / step));
        const int32_t hi = step == 0.f ? 0 : static_cast<int32_t>(nearbyintf(x[2 * p + 1] / step));
        sc.qt16[p * sc.qt_stride + r] = static_cast<int32_t>((static_cast<uint32_t>(hi) << 16) | (static_cast<uint32_t>(lo) & 0xffffu));
      }
    }
    for (int64_t r = rows; r < sc.qt_stride; ++r) {
      sc.q_scale[r] = 0.f;
      for (int64_t p = 0; p < it.dim / 2; ++p) sc.qt16[p * sc.qt_stride + r] = 0;
    }
  }

  static void init_records(const Item& it) {
    for (int64_t a = it.agent_begin; a < it.agent_end; ++a) {
      const AgentRows& ar = it.plan.agent_rows[a];
      for (int64_t r = 0; r < ar.num_rows; ++r) {
        float* rec = it.record(a, r);
        std::memset(rec, 0, sizeof(float) * ar.record_floats);
        rec[0] = O::neg_inf();
      }
    }
    if (it.w.raw_scores) {
      const int64_t n = it.rows_before_end() * (it.w.row_end - it.w.row_begin);
      for (int64_t i = 0; i < n; ++i) it.w.raw_scores[i] = O::neg_inf();
    }
  }

  static void process_item(const Plan& plan, WorkItem& w, float* scratch) {
    const Item it = resolve(plan, w);
    const Scratch sc = carve(scratch, it.dim, plan.max_item_rows);
    init_records(it);
    load_queries(it, sc);
    if (kWide && it.rows_before_end() >= kWideMinRows) transpose_queries(it, sc);
    Tile t;
    for (int64_t row0 = w.row_begin; row0 < w.row_end; row0 += T) {
      const int64_t n = w.row_end - row0 < T ? w.row_end - row0 : T;
      w.base_bytes += load_tile(it, row0, n, true, sc, t);
      if (row0 + T < w.row_end) prefetch_tile(it, row0 + T, w.row_end - row0 - T < T ? w.row_end - row0 - T : T);
      // Runs of agents on the base keys as blocks over all of them; an agent with keys of
      // its own alone.
      for (int64_t a = it.agent_begin; a < it.agent_end;) {
        if (own_keys(it, a)) {
          if (agent_reads_tile(it, a, t)) {
            attend_agents(it, a, a + 1, agent_keys(it, a, sc, t, &w.residual_bytes), static_cast<RowPtrs*>(nullptr), sc, t);
          }
          ++a;
          continue;
        }
        int64_t end = a + 1;
        bool read = agent_reads_tile(it, a, t);
        for (; end < it.agent_end && !own_keys(it, end); ++end) read = read || agent_reads_tile(it, end, t);
        if (!read) {
          a = end;
          continue;
        }
        // The base keys as rows for wide blocks; transposed (built on first use) for narrow ones.
        if (it.st.keys_before_rope) {
          const Strided rows{rotated_keys(it, sc, t), it.dim};
          attend_agents(it, a, end, nullptr, &rows, sc, t);
        } else if (it.integer_qk()) {
          const IntKeys rows{&t, &sc, it.dim};
          attend_agents(it, a, end, nullptr, &rows, sc, t);
        } else {
          const RowPtrs rows{t.k};
          attend_agents(it, a, end, nullptr, &rows, sc, t);
        }
        a = end;
      }
    }
  }

  static int64_t agent_index_in_base(const Item& it, int64_t a) {
    return it.shared ? a - it.p.bases[it.w.base].first_agent : 0;
  }

  // Where item rows' mass goes: row `row` of the lane, for agent a.
  static float* mass_out(const Item& it, int64_t a) {
    if (!it.shared) {
      const AgentAttention& ag = it.p.agents[a];
      return ag.private_mass + it.kv_head * ag.private_mass_head_stride;
    }
    const SharedBase& base = it.p.bases[it.w.base];
    const int64_t i = it.p.mass == AttentionMass::kPerAgent ? agent_index_in_base(it, a) : 0;
    return base.mass + i * base.mass_agent_stride + it.kv_head * base.mass_head_stride;
  }

  // The agent's first score row that adds mass: rows are query-major (query r / group).
  static int64_t first_mass_row(const Item& it, int64_t a) {
    const int64_t first = it.p.agents[a].mass_first_query;
    return (first < 0 ? 0 : first) * it.group;
  }

  static const float* final_lse(const Item& it, int64_t a) {
    return it.plan.lse_rows + it.plan.lse_offset[a] + it.kv_head * it.plan.agent_rows[a].num_rows;
  }

  // Decode: the raw scores kept by process_item, normalised with the final lse.
  static void mass_from_scores(const Item& it) {
    const int64_t keys = it.w.row_end - it.w.row_begin;
    const bool sum_agents = it.shared && it.p.mass == AttentionMass::kSumOverAgents;
    if (sum_agents) {
      float* out = mass_out(it, it.agent_begin) + it.w.row_begin;
      for (int64_t j = 0; j < keys; ++j) out[j] = 0.f;
    }
    for (int64_t a = it.agent_begin; a < it.agent_end; ++a) {
      float* out = mass_out(it, a) + it.w.row_begin;
      if (!sum_agents) {
        for (int64_t j = 0; j < keys; ++j) out[j] = 0.f;
      }
      const float* lse = final_lse(it, a);
      for (int64_t r = first_mass_row(it, a); r < it.plan.agent_rows[a].num_rows; ++r) {
        if (lse[r] == O::neg_inf()) continue;
        const float* s = it.w.raw_scores + (it.row_offset(a) + r) * keys;
        for (int64_t j = 0; j < keys; ++j) {
          if (s[j] != O::neg_inf()) out[j] += expf(s[j] - lse[r]);
        }
      }
    }
  }

  // A window of queries: a second QK pass with the final lse of every row.
  static void mass_second_pass(const Item& it, const Scratch& sc, int64_t* bytes_read) {
    load_queries(it, sc);
    const bool sum_agents = it.shared && it.p.mass == AttentionMass::kSumOverAgents;
    Tile t;
    float mass[T];
    for (int64_t row0 = it.w.row_begin; row0 < it.w.row_end; row0 += T) {
      const int64_t n = it.w.row_end - row0 < T ? it.w.row_end - row0 : T;
      *bytes_read += load_tile(it, row0, n, false, sc, t);
      for (int64_t j = 0; j < T; ++j) mass[j] = 0.f;
      for (int64_t a = it.agent_begin; a < it.agent_end; ++a) {
        if (!sum_agents) {
          for (int64_t j = 0; j < T; ++j) mass[j] = 0.f;
        }
        if (agent_reads_tile(it, a, t)) add_agent_mass(it, a, sc, t, bytes_read, mass);
        if (!sum_agents) std::memcpy(mass_out(it, a) + row0, mass, sizeof(float) * n);
      }
      if (sum_agents) std::memcpy(mass_out(it, it.agent_begin) + row0, mass, sizeof(float) * n);
    }
  }

  static void add_agent_mass(const Item& it, int64_t a, const Scratch& sc, Tile& t, int64_t* bytes_read,
                             float* mass) {
    const AgentAttention& ag = it.p.agents[a];
    const AgentRows& ar = it.plan.agent_rows[a];
    const float* kt = agent_keys(it, a, sc, t, bytes_read);
    const float* q = sc.q + it.row_offset(a) * it.dim;
    const float* lse = final_lse(it, a);
    for (int64_t r0 = first_mass_row(it, a); r0 < ar.num_rows; r0 += kScoreRows) {
      const int64_t rows = ar.num_rows - r0 < kScoreRows ? ar.num_rows - r0 : kScoreRows;
      O::scores(q + r0 * it.dim, rows, kt, it.dim, t.keys_pad, sc.s);
      for (int64_t rr = 0; rr < rows; ++rr) {
        const int64_t r = r0 + rr;
        if (lse[r] == O::neg_inf()) continue;
        float* s = sc.s + rr * T;
        mask_row(s, t, ag.q_positions[r / it.group], it.p.window);
        O::exp_shift_sum(s, t.keys_pad, lse[r]);
        for (int64_t j = 0; j < t.n; ++j) mass[j] += s[j];
      }
    }
  }

  static void mass_item(const Plan& plan, WorkItem& w, float* scratch, int64_t* bytes_read) {
    const Item it = resolve(plan, w);
    if (plan.mass_from_raw_scores) {
      mass_from_scores(it);
    } else {
      mass_second_pass(it, carve(scratch, it.dim, plan.max_item_rows), bytes_read);
    }
  }

  // Agent a's rows of KV head g: partial records of every item merged (max of m, rescaled
  // sums), then out = (acc_v + acc_c B_v,g) / l.
  static void merge_rows(const Plan& plan, int64_t a, int64_t g) {
    const LoraAttentionParams& p = *plan.params;
    const AgentAttention& ag = p.agents[a];
    const AgentRows& ar = plan.agent_rows[a];
    const int64_t dim = p.head_dim, group = plan.group_size;
    const int64_t first = plan.merge_begin[a * p.num_kv_heads + g];
    const int64_t last = plan.merge_begin[a * p.num_kv_heads + g + 1];
    alignas(64) float acc[kMaxHeadDim + 128];
    float* acc_c = acc + dim;
    const int64_t width = dim + ar.rank_pad;
    float* lse_rows = plan.lse_rows + plan.lse_offset[a] + g * ar.num_rows;
    const bool rotated = values_rotated(p, a);
    for (int64_t r = 0; r < ar.num_rows; ++r) {
      const int64_t q = r / group, head = g * group + r % group;
      float m = O::neg_inf();
      for (int64_t i = first; i < last; ++i) m = O::fmax(m, record(plan, plan.merge_ids[i], a, r)[0]);
      float lse = O::neg_inf();
      for (int64_t d = 0; d < width; ++d) acc[d] = 0.f;
      if (m != O::neg_inf()) {
        float l = 0.f;
        for (int64_t i = first; i < last; ++i) {
          const float* rec = record(plan, plan.merge_ids[i], a, r);
          if (rec[0] == O::neg_inf()) continue;
          const float scale = expf(rec[0] - m);
          l += scale * rec[1];
          O::axpy_rows(acc, width, 1.f, &scale, Strided{rec + kRecordHeader, 0}, 1);
        }
        // Values stored as H v: sum p H v = H (sum p v), and H is its own inverse.
        if (rotated) O::hadamard_row(acc, dim);
        if (ag.v.rank > 0) {
          O::axpy_rows(acc, dim, 1.f, acc_c, Strided{ag.v.b + g * ag.v.b_head_stride, ag.v.b_rank_stride}, ag.v.rank);
        }
        O::store_row(acc, dim, 1.f / l, static_cast<char*>(ag.out) + out_offset_bytes(ag, q, head), ag.out_dtype);
        lse = m + logf(l);
      } else {
        O::store_row(acc, dim, 0.f, static_cast<char*>(ag.out) + out_offset_bytes(ag, q, head), ag.out_dtype);
      }
      if (ag.lse) ag.lse[q * ag.lse_row_stride + head] = lse;
      lse_rows[r] = lse;
    }
  }

  // Whether agent a's base rows (shared, else private) are stored Hadamard-rotated; the
  // argument checks make the two agree.
  static bool values_rotated(const LoraAttentionParams& p, int64_t a) {
    for (int64_t b = 0; b < p.num_bases; ++b) {
      const SharedBase& base = p.bases[b];
      if (a < base.first_agent || a >= base.first_agent + base.num_agents) continue;
      if (base.rows.lanes && base.rows.storage) return base.rows.storage->hadamard;
    }
    const PagedRows& own = p.agents[a].private_rows;
    return own.lanes && own.storage && own.storage->hadamard;
  }

  static int64_t out_offset_bytes(const AgentAttention& ag, int64_t q, int64_t head) {
    return (q * ag.out_row_stride + head * ag.out_head_stride) * (ag.out_dtype == ElementType::kFloat32 ? 4 : 2);
  }

  static const float* record(const Plan& plan, int32_t item, int64_t a, int64_t r) {
    const WorkItem& w = plan.items[item];
    const AgentRows& ar = plan.agent_rows[a];
    return w.partial + (w.agent < 0 ? ar.offset : 0) + r * ar.record_floats;
  }

  static constexpr PathKernels kernels() { return PathKernels{&process_item, &merge_rows, &mass_item}; }
};

}  // namespace lorakv::kernels::cpu

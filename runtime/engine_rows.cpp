// runtime/engine_rows.cpp: a context's rows out of the pools and back in (save and restore).
// Export gathers each sequence's rows as stored; import writes them into new sequences in
// runs of one writer (an append has one writer), after adopting what the prefix index
// already holds with the same tokens, key and writers. A context with an eviction policy
// goes lane by lane, with each lane's masks and scores (runtime/evicted_rows.h).
#include <algorithm>
#include <functional>
#include <string>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/engine_state.h"
#include "lorakv/runtime/evicted_rows.h"

namespace lorakv::runtime {

namespace {

SequenceRows export_sequence(const cache::PagedKvCache& cache, SeqId seq) {
  const cache::SequenceState& st = cache.manager().sequence(seq);
  if (!st.indexable || st.first_position != 0) {
    throw ConfigError("a context whose rows were evicted or compacted cannot be exported",
                      {"", "sequence " + std::to_string(seq.value()), "", "",
                       "save the context before its first eviction, or run it without an eviction policy"});
  }
  SequenceRows rows;
  rows.key = st.base_key;
  rows.tokens = st.tokens;
  rows.writers = st.writers.expand();
  const int64_t layers = cache.layout().num_layers;
  for (int64_t layer = 0; layer < layers; ++layer) {
    if (st.base_key.dtype == cache::StorageDtype::kInt8) {  // as stored, scales beside
      const auto [k, v] = cache.gather_layer_int8(seq, layer);
      rows.k.push_back(k.values);
      rows.k_scale.push_back(k.scales);
      rows.v.push_back(v.values);
      rows.v_scale.push_back(v.scales);
      continue;
    }
    const cache::GatheredRows g = cache.gather_layer(seq, layer);  // [heads, n, head_dim]
    rows.k.push_back(g.k.permute({1, 0, 2}).contiguous());
    rows.v.push_back(g.v.permute({1, 0, 2}).contiguous());
  }
  for (const cache::ResidualStream& r : st.residuals) {
    SequenceRows::Residual out{r.key, r.ranks, r.writers.expand(), {}};
    for (int64_t layer = 0; layer < layers; ++layer) {
      const bool adapted = r.ranks[static_cast<size_t>(layer)] > 0;
      out.c.push_back(adapted ? cache.gather_residual(seq, r.key, layer, 0).c : at::Tensor());
    }
    rows.residuals.push_back(std::move(out));
  }
  return rows;
}

// capkv's saved anchor must fit the model: float32 [layers, heads, head_dim], a count >= 0.
void check_query_anchor(const ModelConfig& m, const std::optional<SequenceRows>& rows) {
  if (!rows || (!rows->query_sum.defined() && rows->query_count == 0)) return;
  const at::Tensor& s = rows->query_sum;
  if (!s.defined() || s.scalar_type() != at::kFloat || s.sizes() != at::IntArrayRef({m.num_layers, m.num_heads, m.head_dim}) ||
      rows->query_count < 0) {
    throw ConfigError("saved rows carry a query anchor of another shape than the model's",
                      {"", "rows.query_sum",
                       "float32 [" + std::to_string(m.num_layers) + ", " + std::to_string(m.num_heads) + ", " +
                           std::to_string(m.head_dim) + "]",
                       s.defined() ? std::string(c10::toString(s.scalar_type())) + " " + std::to_string(s.dim()) + "-d" : "none",
                       ""});
  }
}

// Saved rows must be in the dtypes this engine's pools hold (kv_dtype for base rows,
// residual_dtype for C rows): rows are restored as stored, never converted.
void check_dtypes(const cache::CacheConfig& config, const std::optional<SequenceRows>& rows) {
  if (!rows) return;
  const auto refuse = [](const std::string& what, cache::StorageDtype want, cache::StorageDtype got) {
    throw ConfigError("saved " + what + " rows are " + kv_dtype_name(got) + ", this engine's pool holds " + kv_dtype_name(want),
                      {"", what == "base" ? "kv_dtype" : "residual_dtype", kv_dtype_name(want), kv_dtype_name(got),
                       std::string("restore with ") + (what == "base" ? "kv_dtype " : "residual_dtype ") + kv_dtype_name(got)});
  };
  if (rows->key.dtype != config.base_dtype) refuse("base", config.base_dtype, rows->key.dtype);
  for (const SequenceRows::Residual& r : rows->residuals) {
    if (r.key.dtype != config.residual_dtype) refuse("residual", config.residual_dtype, r.key.dtype);
  }
}

// Keys before RoPE (rerotate) and keys after it are different numbers for the same token:
// rows go back only into an engine that stores them as they were saved.
void check_key_frame(bool engine_rerotates, bool saved_before_rope) {
  if (engine_rerotates == saved_before_rope) return;
  const char* saved = saved_before_rope ? "true" : "false";
  throw ConfigError(saved_before_rope ? "saved base keys are stored before RoPE (a rerotating engine saved them), this engine stores them after"
                                      : "saved base keys are stored after RoPE, this rerotating engine stores them before",
                    {"", "rerotate", engine_rerotates ? "true" : "false", saved, std::string("restore with rerotate ") + saved});
}

// The end of the run of equal writers starting at `from`.
int64_t run_end(const std::vector<AdapterIdentity>& writers, int64_t from, int64_t end) {
  int64_t b = from + 1;
  while (b < end && writers[static_cast<size_t>(b)] == writers[static_cast<size_t>(from)]) ++b;
  return b;
}

void append_checked(cache::PagedKvCache& cache, SeqId seq, const cache::AppendRequest& request,
                    const std::function<void(const cache::WritePlan&)>& write) {
  const cache::Capacity cap = cache.can_append(seq, request);
  if (!cap.ok) {
    throw CapacityError("the pools cannot hold the restored rows", {"", "sequence " + std::to_string(seq.value()), "", "",
                                                                    "raise kv_pool_bytes or close sessions"});
  }
  const std::optional<cache::AppendSlots> slots = cache.append(seq, request);
  LORAKV_ASSERT(slots.has_value(), "append failed after can_append said yes");
  write(cache.plan_writes(*slots));
}

void check_shapes(const cache::CacheLayout& l, const SequenceRows& rows) {
  const auto n = static_cast<int64_t>(rows.tokens.size());
  bool ok = static_cast<int64_t>(rows.writers.size()) == n && static_cast<int64_t>(rows.k.size()) == l.num_layers &&
            rows.v.size() == rows.k.size();
  for (size_t i = 0; ok && i < rows.k.size(); ++i) {
    ok = rows.k[i].dim() == 3 && rows.k[i].size(0) == n && rows.k[i].size(1) == l.num_kv_heads &&
         rows.k[i].size(2) == l.head_dim && rows.v[i].sizes() == rows.k[i].sizes();
  }
  ok = ok && int8_scales_fit(rows, [&](size_t i) { return std::vector<int64_t>{n, l.num_kv_heads}; });
  for (const SequenceRows::Residual& r : rows.residuals) {
    ok = ok && static_cast<int64_t>(r.ranks.size()) == l.num_layers && r.c.size() == r.ranks.size() &&
         static_cast<int64_t>(r.writers.size()) <= n;
    for (size_t i = 0; ok && i < r.c.size(); ++i) {
      ok = r.ranks[i] == 0 || (r.c[i].dim() == 2 && r.c[i].size(0) == static_cast<int64_t>(r.writers.size()) &&
                               r.c[i].size(1) == r.ranks[i]);
    }
  }
  if (!ok) throw ConfigError("saved rows do not fit this model's cache layout", {"", "rows"});
}

// Writes `rows` into the new sequence `seq`.
void import_sequence(cache::PagedKvCache& cache, SeqId seq, const SequenceRows& rows) {
  check_shapes(cache.layout(), rows);
  const auto n = static_cast<int64_t>(rows.tokens.size());
  const int64_t layers = cache.layout().num_layers;
  // Indexed blocks of the same tokens, key and writers hold these very rows: adopted.
  const cache::PrefixMatch match = cache.match_prefix(rows.key, rows.tokens, cache::WriterRuns::from(rows.writers));
  cache.create_sequence(seq, rows.key, match);
  for (int64_t a = match.num_tokens; a < n;) {
    const int64_t b = run_end(rows.writers, a, n);
    cache::AppendRequest req;
    req.tokens.assign(rows.tokens.begin() + a, rows.tokens.begin() + b);
    req.writer = rows.writers[static_cast<size_t>(a)];
    append_checked(cache, seq, req, [&](const cache::WritePlan& plan) {
      for (int64_t layer = 0; layer < layers; ++layer) {
        const auto l = static_cast<size_t>(layer);
        if (!rows.k_scale.empty()) {
          cache.write_base_int8(plan, layer, {rows.k[l].narrow(0, a, b - a), rows.k_scale[l].narrow(0, a, b - a)},
                                {rows.v[l].narrow(0, a, b - a), rows.v_scale[l].narrow(0, a, b - a)});
          continue;
        }
        cache.write_base(plan, layer, rows.k[l].narrow(0, a, b - a), rows.v[l].narrow(0, a, b - a));
      }
    });
    a = b;
  }
  for (const SequenceRows::Residual& r : rows.residuals) {
    const auto covered = static_cast<int64_t>(r.writers.size());
    const int64_t have = cache.attach_residual(seq, r.key, r.ranks, cache::WriterRuns::from(r.writers));
    for (int64_t a = have; a < covered;) {
      const int64_t b = run_end(r.writers, a, covered);
      cache::AppendRequest req;
      req.writer = r.writers[static_cast<size_t>(a)];
      req.residuals.push_back({r.key, b - a});
      append_checked(cache, seq, req, [&](const cache::WritePlan& plan) {
        for (int64_t layer = 0; layer < layers; ++layer) {
          const at::Tensor& c = r.c[static_cast<size_t>(layer)];
          if (c.defined()) cache.write_residual(plan, 0, layer, c.narrow(0, a, b - a));
        }
      });
      a = b;
    }
  }
}

}  // namespace

ContextRows Engine::export_context(ContextId context, const std::vector<int32_t>& readers) const {
  const ContextState& c = state_->context(context);
  // With a policy, rows may be evicted or packed: each lane goes with its rows as they are.
  const auto export_rows = [&](SeqId seq) {
    SequenceRows rows = c.policy ? export_lanes(*cache_, seq, c.tokens) : export_sequence(*cache_, seq);
    if (const QueryAnchor* a = c.query_anchor(seq); a && a->sum.defined()) {
      rows.query_sum = a->sum.clone();
      rows.query_count = a->count;
    }
    return rows;
  };
  ContextRows out;
  out.options = c.options;
  out.tokens = c.tokens;
  out.authors = c.authors.expand();
  out.keys_before_rope = options_.rerotate;
  for (const ReaderState& r : c.readers) {
    if (r.private_seq.valid()) {
      throw ConfigError("cannot export a context while a reader has private rows",
                        {"", "context " + std::to_string(context.value()), "", "", "save after the reply ends"});
    }
  }
  if (c.shared_seq.valid()) out.shared = export_rows(c.shared_seq);
  for (int32_t index : readers) {
    const ReaderState& r = state_->reader({context, index});
    out.own.push_back(r.own_seq.valid() ? std::optional<SequenceRows>(export_rows(r.own_seq)) : std::nullopt);
  }
  return out;
}

ContextId Engine::import_context(const ContextRows& rows,
                                 const std::vector<std::shared_ptr<const adapters::Adapter>>& readers) {
  if (rows.own.size() != readers.size()) {
    throw ConfigError("saved rows name another number of readers",
                      {"", "readers", std::to_string(rows.own.size()), std::to_string(readers.size())});
  }
  const auto has_lanes = [](const std::optional<SequenceRows>& s) { return s && !s->lanes.empty(); };
  if (!rows.authors.empty() && rows.authors.size() != rows.tokens.size()) {
    throw ConfigError("saved authors cover another number of tokens than the trajectory",
                      {"", "authors", std::to_string(rows.tokens.size()), std::to_string(rows.authors.size())});
  }
  check_key_frame(options_.rerotate, rows.keys_before_rope);
  check_dtypes(cache_->manager().config(), rows.shared);
  for (const std::optional<SequenceRows>& own : rows.own) check_dtypes(cache_->manager().config(), own);
  if (has_lanes(rows.shared)) check_lanes(cache_->layout(), *rows.shared);
  check_query_anchor(model_.config(), rows.shared);
  for (const std::optional<SequenceRows>& own : rows.own) {
    if (has_lanes(own)) check_lanes(cache_->layout(), *own);
    check_query_anchor(model_.config(), own);
  }
  const ContextId id = create_context(rows.options, readers);
  ContextState& c = state_->context(id);
  append(id, rows.tokens);
  if (!rows.authors.empty()) c.authors = cache::WriterRuns::from(rows.authors);
  // The sequences of the context: the shared one, then each reader's own.
  std::vector<std::pair<const std::optional<SequenceRows>*, SeqId*>> seqs = {{&rows.shared, &c.shared_seq}};
  for (size_t i = 0; i < readers.size(); ++i) seqs.push_back({&rows.own[i], &c.readers[i].own_seq});
  cache_->begin_transaction();
  try {
    for (auto& [saved, seq] : seqs) {
      if (!*saved || has_lanes(*saved)) continue;
      *seq = state_->new_seq();
      import_sequence(*cache_, *seq, **saved);
    }
    cache_->commit_transaction();
  } catch (...) {
    cache_->rollback_transaction();
    c.shared_seq = SeqId();
    for (ReaderState& r : c.readers) r.own_seq = SeqId();
    release_context(id);
    throw;
  }
  const auto anchor_of = [](const std::optional<SequenceRows>& saved) {
    return saved && saved->query_sum.defined() ? QueryAnchor{saved->query_sum.clone(), saved->query_count} : QueryAnchor{};
  };
  c.shared_anchor = anchor_of(rows.shared);
  for (size_t i = 0; i < readers.size(); ++i) c.readers[i].own_anchor = anchor_of(rows.own[i]);
  // Lanes pack and mask rows, which no transaction undoes: on failure the context goes.
  try {
    for (auto& [saved, seq] : seqs) {
      if (!has_lanes(*saved)) continue;
      *seq = state_->new_seq();  // import_lanes creates it before anything can fail
      import_lanes(*cache_, *seq, **saved, options_.prefill_chunk);
    }
  } catch (...) {
    release_context(id);
    throw;
  }
  return id;
}

}  // namespace lorakv::runtime

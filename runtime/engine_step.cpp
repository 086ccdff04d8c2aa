// runtime/engine_step.cpp: one engine step. Plan: turn each work entry into forward items
// (which tokens run with which adapter, which rows they write into which sequence, which
// rows their queries read), reserve every row in the cache up front; run: one batched
// forward whose attention backend writes each layer's base and residual rows where the
// plan put them and then runs the fused kernel once for every item.
#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <set>

#include "cache/attention_views.h"
#include "common/errors.h"
#include "runtime/engine.h"
#include "runtime/engine_state.h"

namespace lorakv::runtime {

namespace {

constexpr size_t kNoWork = std::numeric_limits<size_t>::max();

// Residual rows an item fills: positions [from, item end) of `stream`.
struct Fill {
  const ReaderStream* stream = nullptr;
  int64_t from = 0;
};

// One forward row range: a reader (or the base model, adapter null) running tokens
// [start, end) of its context or of its private rows.
struct Item {
  size_t work = kNoWork;  // the work entry it answers; kNoWork: the base writer's own item
  const adapters::Adapter* adapter = nullptr;
  AdapterIdentity writer;
  bool kv_lora_in_rows = true;
  std::vector<int32_t> tokens;
  int64_t start = 0, end = 0;
  // Rows written: base rows of positions [base_from, end) into write_seq, and `fills`.
  SeqId write_seq;
  int64_t base_from = 0;
  std::vector<Fill> fills;
  std::optional<cache::AppendSlots> slots;
  // Rows read: write_seq's or read_seq's rows below read_limit, the residual streams
  // `reads` with the reader's B, then private_seq's rows.
  SeqId read_seq;
  int64_t read_limit = 0;
  std::vector<const ReaderStream*> reads;
  SeqId private_seq;
  bool all_logits = false;
};

kernels::ElementType element_type(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? kernels::ElementType::kBFloat16 : kernels::ElementType::kFloat32;
}

int64_t coverage(const cache::PagedKvCache& cache, SeqId seq, const ReaderStream& s) {
  for (const cache::ResidualStream& r : cache.manager().sequence(seq).residuals) {
    if (r.key == s.key) return r.covered;
  }
  return 0;
}

int64_t rows_of(const cache::PagedKvCache& cache, SeqId seq) {
  return seq.valid() ? static_cast<int64_t>(cache.manager().sequence(seq).tokens.size()) : 0;
}

// The streams a reader's processing fills: its own (base_shared) or the context's (base_lr_shared).
const std::vector<ReaderStream>& streams_to_fill(const ContextState& c, const ReaderState& r) {
  return c.options.mode == SharingMode::kBaseLrShared ? c.group_streams : r.streams;
}

// The fused kernel's attention for every item of the step, layer by layer.
class PagedAttention final : public AttentionBackend {
 public:
  PagedAttention(cache::PagedKvCache& cache, const ModelConfig& c, std::vector<Item>& items, const at::Tensor& cos,
                 const at::Tensor& sin, double scale)
      : cache_(cache), c_(c), items_(items), cos_(cos), sin_(sin), scale_(scale) {}

  void attend(const LayerAttentionInput& in, const StepPlan& plan) override {
    write_rows(in, plan);
    run_kernel(in, plan);
  }

 private:
  void write_rows(const LayerAttentionInput& in, const StepPlan& plan) {
    for (size_t i = 0; i < items_.size(); ++i) {
      const Item& it = items_[i];
      const int64_t row0 = plan.offsets[i];
      if (it.base_from < it.end) {
        const int64_t off = row0 + it.base_from - it.start, n = it.end - it.base_from;
        cache_.write_base(*it.slots, in.layer, in.k.narrow(0, off, n), in.v.narrow(0, off, n));
      }
      for (size_t f = 0; f < it.fills.size(); ++f) {
        const at::Tensor& a = it.fills[f].stream->a[static_cast<size_t>(in.layer)];  // [rank, hidden]
        if (!a.defined()) continue;
        const int64_t off = row0 + it.fills[f].from - it.start, n = it.end - it.fills[f].from;
        cache_.write_residual(*it.slots, f, in.layer, at::matmul(in.x.narrow(0, off, n), a.t()));  // C = X A^T: [n, rank]
      }
    }
  }

  void run_kernel(const LayerAttentionInput& in, const StepPlan& plan) {
    const int64_t layer = in.layer;
    // Items reading the same rows (sequence, limit) share one base: its tiles load once.
    std::vector<size_t> order(items_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto base_of = [&](size_t i) { return std::make_pair(items_[i].read_seq.value(), items_[i].read_limit); };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return base_of(a) < base_of(b); });

    std::deque<cache::BaseLayerView> base_views, private_views;
    std::deque<cache::ResidualLayerView> residual_views;
    std::vector<kernels::SharedBase> bases;
    std::vector<kernels::AgentAttention> agents;
    agents.reserve(order.size());
    bool needs_rope = false;
    for (size_t pos = 0; pos < order.size(); ++pos) {
      const size_t i = order[pos];
      const Item& it = items_[i];
      if (pos == 0 || base_of(i) != base_of(order[pos - 1])) {
        base_views.push_back(cache::BaseLayerView::of(cache_, it.read_seq, layer, it.read_limit));
        kernels::SharedBase b;
        b.rows = base_views.back().rows();
        b.first_agent = static_cast<int64_t>(pos);
        bases.push_back(b);
      }
      ++bases.back().num_agents;
      const int64_t row0 = plan.offsets[i], n = plan.offsets[i + 1] - row0;
      const at::Tensor q = in.q.narrow(0, row0, n), out = in.out.narrow(0, row0, n);
      kernels::AgentAttention a;
      a.num_queries = n;
      a.q = q.data_ptr();
      a.q_dtype = element_type(q);
      a.q_row_stride = q.stride(0);
      a.q_head_stride = q.stride(1);
      a.q_positions = plan.positions.data_ptr<int64_t>() + row0;
      a.out = out.data_ptr();
      a.out_dtype = element_type(out);
      a.out_row_stride = out.stride(0);
      a.out_head_stride = out.stride(1);
      for (const ReaderStream* s : it.reads) {
        const at::Tensor& b = s->b[static_cast<size_t>(layer)];
        if (!b.defined()) continue;
        residual_views.push_back(cache::ResidualLayerView::of(cache_, it.read_seq, s->key, layer, it.read_limit));
        const int64_t rank = residual_views.back().rank();
        kernels::LowRankStream stream = residual_views.back().stream(b.data_ptr<float>(), rank * c_.head_dim, c_.head_dim);
        if (s->module == adapters::ModuleId::kV) {
          a.v = stream;
        } else {
          a.k = stream;
          needs_rope = true;
        }
      }
      if (it.private_seq.valid()) {
        private_views.push_back(cache::BaseLayerView::of(cache_, it.private_seq, layer));
        a.private_rows = private_views.back().rows();
      }
      agents.push_back(a);
    }
    kernels::LoraAttentionParams p;
    p.num_heads = c_.num_heads;
    p.num_kv_heads = c_.num_kv_heads;
    p.head_dim = c_.head_dim;
    p.scale = static_cast<float>(scale_);
    p.window = c_.sliding_window;
    if (needs_rope) {
      p.rope_cos = cos_.data_ptr<float>();
      p.rope_sin = sin_.data_ptr<float>();
      p.rope_rows = cos_.size(0);
    }
    p.bases = bases.data();
    p.num_bases = static_cast<int64_t>(bases.size());
    p.agents = agents.data();
    p.num_agents = static_cast<int64_t>(agents.size());
    kernels::lora_attention(p);
  }

  cache::PagedKvCache& cache_;
  const ModelConfig& c_;
  std::vector<Item>& items_;
  const at::Tensor& cos_;
  const at::Tensor& sin_;
  double scale_;
};

}  // namespace

int64_t Engine::pending_tokens(ReaderRef ref) const {
  const ContextState& c = state_->context(ref.context);
  const ReaderState& r = state_->reader(ref);
  const auto n = static_cast<int64_t>(c.tokens.size());
  if (c.options.mode == SharingMode::kFull) return n - rows_of(*cache_, r.own_seq);
  int64_t pending = n - rows_of(*cache_, c.shared_seq);
  if (c.options.mode == SharingMode::kBaseShared || c.options.mode == SharingMode::kBaseLrShared) {
    const std::vector<ReaderStream>& streams = c.options.mode == SharingMode::kBaseShared ? r.streams : c.group_streams;
    for (const ReaderStream& s : streams) {
      pending = std::max(pending, n - (c.shared_seq.valid() ? coverage(*cache_, c.shared_seq, s) : 0));
    }
  }
  return pending;
}

namespace {

// Creates the rows a reader's work needs to exist: its context's shared sequence (or its
// own, in full), reusing indexed blocks of the same tokens and key, and the residual
// streams it fills or reads. Adopts blocks only; needs no free blocks.
void prepare_rows(cache::PagedKvCache& cache, Engine::State& st, ContextState& c, ReaderState& r) {
  const cache::StorageDtype dtype = cache.manager().config().dtype;
  if (c.options.mode == SharingMode::kFull) {
    if (r.own_seq.valid()) return;
    r.own_seq = st.new_seq();
    cache::WriterFilter f;
    f.required = r.identity;
    const cache::ContentKey key = own_base_key(r, dtype);
    cache.create_sequence(r.own_seq, key, cache.match_prefix(key, c.tokens, f));
    return;
  }
  const cache::WriterFilter filter = shared_writer_filter(c.options.writer);
  if (!c.shared_seq.valid()) {
    c.shared_seq = st.new_seq();
    const cache::ContentKey key = shared_base_key(c.options.mode, dtype);
    cache.create_sequence(c.shared_seq, key, cache.match_prefix(key, c.tokens, filter));
  }
  // base_shared residual rows are always the reader's own (C_i = X_i A_i); the shared C of
  // base_lr_shared comes from the context's writer.
  cache::WriterFilter residual_filter = filter;
  if (c.options.mode == SharingMode::kBaseShared) residual_filter.required = r.identity;
  for (const ReaderStream& s : streams_to_fill(c, r)) {
    const cache::SequenceState& seq = cache.manager().sequence(c.shared_seq);
    const bool attached = std::any_of(seq.residuals.begin(), seq.residuals.end(),
                                      [&](const cache::ResidualStream& x) { return x.key == s.key; });
    if (!attached) cache.attach_residual(c.shared_seq, s.key, s.ranks, residual_filter);
  }
}

// The cache as this step's plan leaves it: rows and coverage the items planned so far will
// have written, so later work entries on one context plan after earlier ones.
struct PlannedRows {
  const cache::PagedKvCache& cache;
  std::map<int64_t, int64_t> rows;                                  // sequence -> rows
  std::map<std::pair<int64_t, std::string>, int64_t> covered;  // (sequence, stream) -> covered

  static std::string name(const ReaderStream& s) {
    return std::to_string(static_cast<int>(s.key.kind)) + s.key.adapter.hex();
  }

  int64_t rows_of(SeqId seq) const {
    auto it = rows.find(seq.value());
    return it != rows.end() ? it->second : ::lorakv::runtime::rows_of(cache, seq);
  }
  int64_t coverage(SeqId seq, const ReaderStream& s) const {
    auto it = covered.find({seq.value(), name(s)});
    return it != covered.end() ? it->second : ::lorakv::runtime::coverage(cache, seq, s);
  }
  void add(const Item& it) {
    if (it.base_from < it.end) rows[it.write_seq.value()] = it.end;
    for (const Fill& f : it.fills) covered[{it.write_seq.value(), name(*f.stream)}] = it.end;
  }
};

// The items of one kContext work entry (none when the reader has nothing to process).
std::vector<Item> plan_context_work(const PlannedRows& cache, const ContextState& c, const ReaderState& r,
                                    size_t work, int64_t chunk, bool all_logits) {
  std::vector<Item> items;
  const auto n = static_cast<int64_t>(c.tokens.size());
  const SharingMode mode = c.options.mode;
  auto context_item = [&](const adapters::Adapter* adapter, AdapterIdentity writer, int64_t start, int64_t end) {
    Item it;
    it.work = work;
    it.adapter = adapter;
    it.writer = writer;
    it.kv_lora_in_rows = !mode_keeps_residuals(mode);
    it.tokens.assign(c.tokens.begin() + start, c.tokens.begin() + end);
    it.start = start;
    it.end = end;
    it.base_from = end;  // no base rows unless set
    it.read_limit = end;
    it.all_logits = all_logits;
    return it;
  };
  if (mode == SharingMode::kFull) {
    const int64_t w = cache.rows_of(r.own_seq);
    if (w >= n) return items;
    Item it = context_item(r.adapter.get(), r.identity, w, std::min(n, w + chunk));
    it.write_seq = it.read_seq = r.own_seq;
    it.base_from = w;
    items.push_back(std::move(it));
    return items;
  }
  const int64_t w = cache.rows_of(c.shared_seq);
  const std::vector<ReaderStream>& fills = streams_to_fill(c, r);
  int64_t base_end = w;
  if (c.options.writer == SharedWriter::kBase && w < n) {
    // The base model processes the new tokens first and writes the shared rows (and, in
    // base_lr_shared, the shared C); the reader builds only its own residuals.
    Item it = context_item(nullptr, AdapterIdentity::base_model(), w, std::min(n, w + chunk));
    it.work = kNoWork;
    it.write_seq = it.read_seq = c.shared_seq;
    it.base_from = w;
    if (mode == SharingMode::kBaseLrShared) {
      for (const ReaderStream& s : fills) it.fills.push_back({&s, cache.coverage(c.shared_seq, s)});
    }
    base_end = it.end;
    items.push_back(std::move(it));
  }
  const bool reader_writes_base = c.options.writer == SharedWriter::kFirst;
  const bool reader_fills = mode == SharingMode::kBaseShared || (mode == SharingMode::kBaseLrShared && reader_writes_base);
  int64_t start = reader_writes_base ? w : n;
  if (reader_fills) {
    for (const ReaderStream& s : fills) start = std::min(start, cache.coverage(c.shared_seq, s));
  }
  const int64_t limit = reader_writes_base ? n : base_end;
  if (start >= limit) return items;
  Item it = context_item(r.adapter.get(), r.identity, start, std::min(limit, start + chunk));
  it.write_seq = it.read_seq = c.shared_seq;
  if (reader_writes_base && w < it.end) it.base_from = w;
  if (reader_fills) {
    for (const ReaderStream& s : fills) {
      const int64_t from = cache.coverage(c.shared_seq, s);
      if (from < it.end) it.fills.push_back({&s, from});
    }
  }
  for (const ReaderStream& s : r.streams) it.reads.push_back(&s);
  items.push_back(std::move(it));
  return items;
}

// Rows an item's append takes, at most, from each pool: every lane may start a block and
// copy a shared partial one.
void add_upper_bound(const cache::PagedKvCache& cache, const Item& it, std::vector<int64_t>& need) {
  const cache::CacheLayout& l = cache.layout();
  const int64_t lanes_per_layer = l.num_groups();
  // A sequence not created yet (a first private row) has no partial block to copy.
  const int64_t copy = it.write_seq.valid() ? 1 : 0;
  if (it.base_from < it.end) need[0] += l.num_lanes() * (l.blocks_for(it.end - it.base_from) + copy);
  for (const Fill& f : it.fills) {
    for (size_t layer = 0; layer < f.stream->ranks.size(); ++layer) {
      const int64_t rank = f.stream->ranks[layer];
      if (rank == 0) continue;
      need[static_cast<size_t>(cache.manager().pool_for_rank(rank))] +=
          lanes_per_layer * (l.blocks_for(it.end - f.from) + 1);
    }
  }
}

cache::AppendRequest append_request(const Item& it) {
  cache::AppendRequest req;
  req.writer = it.writer;
  if (it.base_from < it.end) req.tokens.assign(it.tokens.begin() + (it.base_from - it.start), it.tokens.end());
  for (const Fill& f : it.fills) req.residuals.push_back({f.stream->key, it.end - f.from});
  return req;
}

}  // namespace

StepResult Engine::step(const std::vector<StepWork>& work) {
  StepResult result;
  result.outputs.resize(work.size());
  std::set<std::pair<int64_t, int32_t>> seen;
  for (const StepWork& w : work) {
    state_->reader(w.reader);  // throws for an unknown context or reader
    if (!seen.insert({w.reader.context.value(), w.reader.index}).second) {
      throw ConfigError("two work items for one reader in one step",
                        {"", "context " + std::to_string(w.reader.context.value()) + " reader " + std::to_string(w.reader.index)});
    }
    if (w.kind == StepWork::Kind::kPrivate) {
      if (w.tokens.empty()) throw ConfigError("private work needs tokens");
      if (pending_tokens(w.reader) > 0) {
        throw ConfigError("private work for a reader that has not processed its context",
                          {"", "context " + std::to_string(w.reader.context.value()) + " reader " +
                                   std::to_string(w.reader.index),
                           "0 pending context tokens", std::to_string(pending_tokens(w.reader)), "call Engine::prefill first"});
      }
      for (int32_t t : w.tokens) {
        if (t < 0 || t >= model_.config().vocab_size) throw ConfigError("token id out of range", {"", "", "", std::to_string(t), ""});
      }
    }
  }

  // Plan, against the cache as it is: every item's rows, then one capacity check.
  std::vector<Item> items;
  PlannedRows planned_rows{*cache_, {}, {}};
  for (size_t i = 0; i < work.size(); ++i) {
    const StepWork& w = work[i];
    ContextState& c = state_->context(w.reader.context);
    ReaderState& r = state_->reader(w.reader);
    prepare_rows(*cache_, *state_, c, r);
    if (w.kind == StepWork::Kind::kContext) {
      std::vector<Item> planned = plan_context_work(planned_rows, c, r, i,
                                                    w.max_tokens > 0 ? w.max_tokens : options_.prefill_chunk, w.all_logits);
      // Work entries on one context run in order: a later one plans against the rows an
      // earlier one of this step will have written.
      for (Item& it : planned) {
        planned_rows.add(it);
        items.push_back(std::move(it));
      }
      continue;
    }
    Item it;
    it.work = i;
    it.adapter = r.adapter.get();
    it.writer = r.identity;
    it.kv_lora_in_rows = true;  // private rows are the reader's full rows
    it.tokens = w.tokens;
    if (!r.private_seq.valid()) r.private_after = static_cast<int64_t>(c.tokens.size());
    it.start = r.private_after + static_cast<int64_t>(r.private_tokens.size());
    it.end = it.start + static_cast<int64_t>(w.tokens.size());
    it.base_from = it.start;
    it.read_seq = c.options.mode == SharingMode::kFull ? r.own_seq : c.shared_seq;
    it.read_limit = r.private_after;
    it.write_seq = it.private_seq = r.private_seq;  // invalid until its first row
    for (const ReaderStream& s : r.streams) it.reads.push_back(&s);
    it.all_logits = w.all_logits;
    items.push_back(std::move(it));
  }
  // Planned in order, no two items write the same rows.
  for (size_t a = 0; a < items.size(); ++a) {
    for (size_t b = a + 1; b < items.size(); ++b) {
      const Item &x = items[a], &y = items[b];
      LORAKV_ASSERT(!x.write_seq.valid() || x.write_seq != y.write_seq || x.base_from >= x.end || y.base_from >= y.end ||
                        y.base_from >= x.end || x.base_from >= y.end,
                    "two items of one step plan the same rows");
    }
  }
  // Capacity: exact (the cache's own count) for a sequence with one append this step, an
  // upper bound where several items append to one sequence or it does not exist yet.
  std::map<int64_t, int> appends_per_seq;
  for (const Item& it : items) {
    if (it.write_seq.valid()) ++appends_per_seq[it.write_seq.value()];
  }
  std::vector<int64_t> need(static_cast<size_t>(cache_->manager().num_pools()), 0);
  for (const Item& it : items) {
    if (it.write_seq.valid() && appends_per_seq[it.write_seq.value()] == 1) {
      const cache::Capacity exact = cache_->can_append(it.write_seq, append_request(it));
      for (size_t p = 0; p < need.size(); ++p) need[p] += exact.blocks_needed[p];
    } else {
      add_upper_bound(*cache_, it, need);
    }
  }
  result.capacity.blocks_needed = need;
  for (int32_t p = 0; p < cache_->manager().num_pools(); ++p) {
    result.capacity.blocks_free.push_back(cache_->manager().allocator(p).num_free());
    result.capacity.ok = result.capacity.ok && need[static_cast<size_t>(p)] <= result.capacity.blocks_free.back();
  }
  if (!result.capacity.ok) {
    result.ok = false;
    result.outputs.clear();
    return result;
  }

  // Reserve: private sequences, then every item's rows, in order.
  for (Item& it : items) {
    if (it.work != kNoWork && work[it.work].kind == StepWork::Kind::kPrivate) {
      ReaderState& r = state_->reader(work[it.work].reader);
      if (!r.private_seq.valid()) {
        r.private_seq = state_->new_seq();
        cache_->create_suffix_sequence(r.private_seq, own_base_key(r, cache_->manager().config().dtype), r.private_after);
      }
      it.write_seq = it.private_seq = r.private_seq;
    }
    const cache::AppendRequest req = append_request(it);
    if (req.tokens.empty() && req.residuals.empty()) continue;
    it.slots = cache_->append(it.write_seq, req);
    LORAKV_ASSERT(it.slots.has_value(), "append failed after the step's capacity check");
  }
  if (items.empty()) {
    if (observer_) observer_->after_step(work, result);
    return result;
  }

  // Run.
  int64_t max_end = 0;
  bool all_logits = false;
  std::vector<SequenceInput> batch;
  for (const Item& it : items) {
    max_end = std::max(max_end, it.end);
    all_logits = all_logits || it.all_logits;
    SequenceInput in;
    in.seq = it.write_seq;
    in.tokens = it.tokens;
    in.adapter = it.adapter;
    in.kv_lora_in_rows = it.kv_lora_in_rows;
    in.first_position = it.start;
    batch.push_back(std::move(in));
  }
  if (!state_->rope_cos.defined() || state_->rope_cos.size(0) < max_end) {
    int64_t rows = 1024;
    while (rows < max_end) rows *= 2;
    std::tie(state_->rope_cos, state_->rope_sin) = model_.rope_half_tables(rows);
  }
  PagedAttention backend(*cache_, model_.config(), items, state_->rope_cos, state_->rope_sin, model_.attention_scale());
  ForwardOptions fo;
  fo.all_logits = all_logits;
  const at::Tensor logits = model_.forward(batch, backend, fo);

  int64_t row = 0;
  for (const Item& it : items) {
    const int64_t n = all_logits ? it.end - it.start : 1;
    if (it.work != kNoWork) {
      StepOutput& out = result.outputs[it.work];
      out.logits = it.all_logits || !all_logits ? logits.narrow(0, row, n) : logits.narrow(0, row + n - 1, 1);
      out.tokens_processed = it.end - it.start;
      out.first_position = it.start;
      if (work[it.work].kind == StepWork::Kind::kPrivate) {
        ReaderState& r = state_->reader(work[it.work].reader);
        r.private_tokens.insert(r.private_tokens.end(), it.tokens.begin(), it.tokens.end());
      }
    }
    row += n;
  }
  for (StepOutput& out : result.outputs) {
    if (!out.logits.defined()) out.logits = at::empty({0, model_.config().vocab_size}, at::kFloat);
  }
  if (observer_) observer_->after_step(work, result);
  return result;
}

}  // namespace lorakv::runtime

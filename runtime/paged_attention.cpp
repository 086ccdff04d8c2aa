// runtime/paged_attention.cpp: the run phase of an engine step: one batched forward whose
// attention backend writes each layer's base and residual rows where the plan put them and
// then runs the fused kernel once for every item.
#include <algorithm>
#include <optional>
#include <utility>

#include "lorakv/cache/step_views.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"
#include "lorakv/runtime/eviction_scores.h"
#include "lorakv/runtime/step_items.h"

namespace lorakv::runtime {

namespace {

kernels::ElementType element_type(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? kernels::ElementType::kBFloat16 : kernels::ElementType::kFloat32;
}

// The fused kernel's attention for every item of the step, layer by layer. Everything that
// depends only on the step is built once, in the constructor (FlashInfer's plan/run split):
// the kernel's views of every layer (cache::StepViews: block tables, row counts, RoPE
// bounds), the write slots of every reserved row as index tensors, and the kernel's base
// grouping. Each layer then fills in only its own pointers (q, out, B) and runs.
class PagedAttention final : public AttentionBackend {
 public:
  PagedAttention(cache::PagedKvCache& cache, const ModelConfig& c, std::vector<Item>& items, const at::Tensor& cos,
                 const at::Tensor& sin, double scale, StepStats& stats, std::vector<ScoredSeq> scored,
                 std::vector<AnchoredSeq> anchored, std::vector<SeqId> bounded)
      : cache_(cache), c_(c), items_(items), cos_(cos), sin_(sin), scale_(scale), stats_(stats), views_(cache),
        scored_(std::move(scored)), anchored_(std::move(anchored)), bounded_(std::move(bounded)) {
    const log::Stopwatch watch;
    plan_step();
    stats_.views_seconds += watch.seconds();
  }

  void attend(const LayerAttentionInput& in, const StepPlan& plan) override {
    const log::Stopwatch write_watch;
    write_rows(in, plan);
    if (!anchored_.empty()) add_queries(in, plan);
    stats_.write_seconds += write_watch.seconds();
    const log::Stopwatch views_watch;
    fill_layer(in, plan);
    stats_.views_seconds += views_watch.seconds();
    const log::Stopwatch kernel_watch;
    const int64_t plans = kernel_plan_.plans_built();
    kernels::lora_attention(params_);
    stats_.kernel_seconds += kernel_watch.seconds();
    stats_.kernel_plans += kernel_plan_.plans_built() - plans;
    if (mass_) add_scores(in.layer);
    if (mass_) keep_reader_mass(in.layer);
  }

  // After the forward: the queries each anchored sequence's writer ran this step.
  std::vector<AnchoredSeq>& anchored() { return anchored_; }
  // After the forward: each reader's mass on the sequences kept for the loss bound.
  std::vector<StepMass>& step_mass() { return step_mass_; }

 private:
  // What an item reads, as StepViews ids.
  struct ItemReads {
    int64_t base = -1, private_rows = -1;
    std::vector<std::pair<const ReaderStream*, int64_t>> streams;  // with its residual read
  };

  void plan_step() {
    // Items reading the same rows (sequence, limit) share one base: its tiles load once.
    order_.resize(items_.size());
    for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    auto base_of = [&](size_t i) { return std::make_pair(items_[i].read_seq.value(), items_[i].read_limit); };
    std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) { return base_of(a) < base_of(b); });
    reads_.resize(items_.size());
    writes_.reserve(items_.size());
    for (size_t pos = 0; pos < order_.size(); ++pos) {
      const size_t i = order_[pos];
      const Item& it = items_[i];
      ItemReads& r = reads_[i];
      // Keys before RoPE: shared rows from index 0, private rows after the shared ones read.
      const bool by_row = cache_.manager().config().keys_before_rope;
      r.base = views_.add_base(it.read_seq, it.read_limit, by_row ? 0 : -1);
      if (pos == 0 || base_of(i) != base_of(order_[pos - 1])) {
        kernels::SharedBase b;
        b.first_agent = static_cast<int64_t>(pos);
        bases_.push_back(b);
        base_reads_.push_back(r.base);
      }
      ++bases_.back().num_agents;
      base_of_agent_.push_back(bases_.size() - 1);
      for (const ReaderStream* s : it.reads) r.streams.emplace_back(s, views_.add_residual(r.base, s->key));
      if (it.private_seq.valid()) {
        r.private_rows = views_.add_base(it.private_seq, cache::BaseLayerView::kAllPositions, by_row ? views_.rows_read(r.base) : -1);
      }
    }
    for (const Item& it : items_) {
      writes_.push_back(it.slots ? cache_.plan_writes(*it.slots) : cache::WritePlan{});
      author_writes_.push_back(it.author_slots ? cache_.plan_writes(*it.author_slots) : cache::WritePlan{});
    }
    views_.finish();
    agents_.resize(items_.size());
    params_.num_heads = c_.num_heads;
    params_.num_kv_heads = c_.num_kv_heads;
    params_.head_dim = c_.head_dim;
    params_.scale = static_cast<float>(scale_);
    params_.window = c_.sliding_window;
    params_.bases = bases_.data();
    params_.num_bases = static_cast<int64_t>(bases_.size());
    params_.agents = agents_.data();
    params_.num_agents = static_cast<int64_t>(agents_.size());
    params_.plan = &kernel_plan_;
    plan_mass();
  }

  // With a scored read in the step, the kernel returns attention mass; it then needs an
  // output for every base and every agent's private rows, sized for the longest lane (per
  // agent when a sequence scores by the max over readers).
  void plan_mass() {
    choose_scored_reads();
    if (!mass_) return;
    const bool per_agent = bound_mass_ || std::any_of(scored_.begin(), scored_.end(), [](const ScoredSeq& s) { return s.readers == ScoredSeq::Readers::kMax; });
    params_.mass = per_agent ? kernels::AttentionMass::kPerAgent : kernels::AttentionMass::kSumOverAgents;
    auto longest = [&](int64_t read) {
      int64_t rows = 0;
      for (int64_t layer = 0; layer < c_.num_layers; ++layer) {
        const kernels::PagedRows r = views_.base_rows(read, layer);
        for (int64_t l = 0; l < c_.num_kv_heads / r.heads_per_lane; ++l) rows = std::max(rows, r.lanes[l].num_rows);
      }
      return std::max<int64_t>(rows, 1);
    };
    base_mass_stride_.resize(bases_.size());
    base_mass_.resize(bases_.size());
    for (size_t b = 0; b < bases_.size(); ++b) {
      base_mass_stride_[b] = longest(base_reads_[b]);
      const int64_t slices = per_agent ? bases_[b].num_agents : 1;
      base_mass_[b].assign(static_cast<size_t>(slices * c_.num_kv_heads * base_mass_stride_[b]), 0.f);
    }
    private_mass_stride_.assign(items_.size(), 0);
    private_mass_.resize(items_.size());
    for (size_t pos = 0; pos < order_.size(); ++pos) {
      const ItemReads& r = reads_[order_[pos]];
      if (r.private_rows < 0) continue;
      private_mass_stride_[pos] = longest(r.private_rows);
      private_mass_[pos].assign(static_cast<size_t>(c_.num_kv_heads * private_mass_stride_[pos]), 0.f);
    }
    plan_reader_mass();
  }

  // One ReaderMass per agent reading a sequence kept for the loss bound.
  void plan_reader_mass() {
    reader_mass_.assign(items_.size(), {-1, -1});
    for (size_t pos = 0; pos < order_.size(); ++pos) {
      const Item& it = items_[order_[pos]];
      if (!bounded(it.read_seq)) continue;
      auto seq = std::find_if(step_mass_.begin(), step_mass_.end(), [&](const StepMass& m) { return m.seq == it.read_seq; });
      if (seq == step_mass_.end()) seq = step_mass_.insert(step_mass_.end(), StepMass{it.read_seq, {}});
      ReaderMass m;
      for (const ReaderStream* s : it.reads) {
        if (s->module == adapters::ModuleId::kV) m.value_stream = s;
      }
      m.private_seq = it.private_seq;
      m.queries = (it.end - it.start) - mass_first_query_[pos];
      m.stride = base_mass_stride_[base_of_agent_[pos]];
      m.mass.resize(static_cast<size_t>(c_.num_layers));
      m.rows_read.resize(static_cast<size_t>(c_.num_layers));
      reader_mass_[pos] = {seq - step_mass_.begin(), static_cast<int64_t>(seq->readers.size())};
      seq->readers.push_back(std::move(m));
    }
  }

  // The layer's mass of every agent kept for the loss bound (its slice of its base's mass).
  void keep_reader_mass(int64_t layer) {
    for (size_t pos = 0; pos < order_.size(); ++pos) {
      const auto [seq, reader] = reader_mass_[pos];
      if (seq < 0) continue;
      const size_t b = base_of_agent_[pos];
      ReaderMass& m = step_mass_[static_cast<size_t>(seq)].readers[static_cast<size_t>(reader)];
      const int64_t slice = static_cast<int64_t>(pos) - bases_[b].first_agent, size = c_.num_kv_heads * m.stride;
      const float* from = base_mass_[b].data() + slice * size;
      m.mass[static_cast<size_t>(layer)].assign(from, from + size);
      const kernels::PagedRows rows = bases_[b].rows;
      std::vector<int64_t>& read = m.rows_read[static_cast<size_t>(layer)];
      for (int64_t g = 0; g < cache_.layout().num_groups(); ++g) read.push_back(rows.lanes ? rows.lanes[g].num_rows : 0);
    }
  }

  bool bounded(SeqId seq) const { return std::find(bounded_.begin(), bounded_.end(), seq) != bounded_.end(); }

  // Which reads add mass this step, and from which queries. Accumulating policies (H2O):
  // every query of every scoring reader. Observation windows (SnapKV): only when the step
  // writes rows into the sequence, then the newest `window` queries of each scoring reader,
  // and the sequence's scores start again from zero. With Readers::kWriter only the items
  // writing the rows score. A read of a sequence kept for the loss bound returns mass from
  // every query even when it scores nothing (then its mass adds to no score).
  void choose_scored_reads() {
    mass_first_query_.assign(items_.size(), 0);
    scores_from_.assign(items_.size(), 0);
    for (size_t pos = 0; pos < order_.size(); ++pos) {
      const Item& it = items_[order_[pos]];
      const int64_t queries = it.end - it.start;
      mass_first_query_[pos] = scoring_first_query(it, queries);
      scores_from_[pos] = mass_first_query_[pos] < queries;
      if (bounded(it.read_seq)) {
        bound_mass_ = true;
        if (!scores_from_[pos]) mass_first_query_[pos] = 0;
      }
    }
    mass_ = !accumulating_.empty() || bound_mass_;
    for (SeqId seq : observed_) cache_.reset_scores(seq);
  }

  // The first of the item's `queries` whose mass scores the rows it reads (its sequence then
  // joins accumulating_, and observed_ for an observation window); `queries`: none does.
  int64_t scoring_first_query(const Item& it, int64_t queries) {
    const auto scored = std::find_if(scored_.begin(), scored_.end(), [&](const ScoredSeq& s) { return s.seq == it.read_seq; });
    if (scored == scored_.end()) return queries;
    const bool writer = it.write_seq == it.read_seq && it.base_from < it.end;
    if (scored->readers == ScoredSeq::Readers::kWriter && !writer) return queries;
    if (scored->window == 0) {
      add_once(accumulating_, it.read_seq);
      return 0;
    }
    if (!writes(it.read_seq)) return queries;
    add_once(accumulating_, it.read_seq);
    add_once(observed_, it.read_seq);
    return std::max<int64_t>(0, queries - scored->window);
  }

  bool writes(SeqId seq) const {
    return std::any_of(items_.begin(), items_.end(), [&](const Item& it) { return it.write_seq == seq && it.base_from < it.end; });
  }

  static void add_once(std::vector<SeqId>& seqs, SeqId seq) {
    if (std::find(seqs.begin(), seqs.end(), seq) == seqs.end()) seqs.push_back(seq);
  }

  // The layer's mass onto each scored sequence's rows: per lane, each reader's mass summed
  // over the lane's KV heads, then combined over the readers of every base that reads the
  // sequence (summed, or the max for Readers::kMax).
  void add_scores(int64_t layer) {
    const cache::CacheLayout& l = cache_.layout();
    const bool per_agent = params_.mass == kernels::AttentionMass::kPerAgent;
    for (const ScoredSeq& scored : scored_) {
      if (std::find(accumulating_.begin(), accumulating_.end(), scored.seq) == accumulating_.end()) continue;
      const bool max = scored.readers == ScoredSeq::Readers::kMax;
      for (int64_t g = 0; g < l.num_groups(); ++g) {
        lane_mass_.clear();
        for (size_t b = 0; b < bases_.size(); ++b) {
          if (items_[order_[static_cast<size_t>(bases_[b].first_agent)]].read_seq != scored.seq) continue;
          const kernels::PagedRows rows = bases_[b].rows;
          const int64_t n = rows.lanes ? rows.lanes[g].num_rows : 0;
          if (n > static_cast<int64_t>(lane_mass_.size())) lane_mass_.resize(static_cast<size_t>(n), 0.f);
          const int64_t slices = per_agent ? bases_[b].num_agents : 1;
          for (int64_t a = 0; a < slices; ++a) {
            if (!per_agent || scores_from_[static_cast<size_t>(bases_[b].first_agent + a)]) add_reader_mass(b, a, g, n, max);
          }
        }
        if (!lane_mass_.empty()) cache_.add_scores(scored.seq, l.lane(layer, g), lane_mass_.data(), static_cast<int64_t>(lane_mass_.size()));
      }
    }
  }

  // Reader slice `a` of base `b`: its mass over head group g's KV heads, into lane_mass_.
  void add_reader_mass(size_t b, int64_t a, int64_t g, int64_t n, bool max) {
    const cache::CacheLayout& l = cache_.layout();
    const int64_t stride = base_mass_stride_[b];
    const float* slice = base_mass_[b].data() + a * c_.num_kv_heads * stride;
    for (int64_t r = 0; r < n; ++r) {
      float m = 0;
      for (int64_t h = g * l.heads_per_group; h < (g + 1) * l.heads_per_group; ++h) m += slice[h * stride + r];
      float& out = lane_mass_[static_cast<size_t>(r)];
      out = max ? std::max(out, m) : out + m;
    }
  }

  // The step's queries into the anchors they write (AnchoredSeq): each item writing an
  // anchored sequence's rows adds its queries at positions >= the sinks, before RoPE.
  void add_queries(const LayerAttentionInput& in, const StepPlan& plan) {
    for (size_t i = 0; i < items_.size(); ++i) {
      const Item& it = items_[i];
      if (it.base_from >= it.end) continue;
      for (AnchoredSeq& a : anchored_) {
        if (a.seq != it.write_seq) continue;
        const int64_t from = std::max(it.base_from, a.sinks);
        if (from >= it.end) break;
        const int64_t off = plan.offsets[i] + from - it.start, n = it.end - from;
        const at::Tensor q = unrotated(in.q.narrow(0, off, n), plan.positions.narrow(0, off, n), cos_, sin_);  // float32 [n, heads, D]
        if (!a.step_sum.defined()) a.step_sum = at::zeros({c_.num_layers, c_.num_heads, c_.head_dim}, at::kFloat);
        a.step_sum[in.layer].add_(q.sum(0));
        if (in.layer == 0) a.step_count += n;
        break;
      }
    }
  }

  bool keys_before_rope() const override { return cache_.manager().config().keys_before_rope; }

  // The layer's base rows of every item as one scatter per lane (the batch plan is made at
  // the first layer: the step's batch offsets come with the forward), then each item's
  // residual rows, C = X A per stream; the same for the author rows of private items
  // (writer author's fast form), from the base K and V.
  void write_rows(const LayerAttentionInput& in, const StepPlan& plan) {
    const at::Tensor& k = keys_before_rope() ? in.k_before_rope : in.k;
    if (!batch_writes_) batch_writes_ = plan_batch_writes(plan, /*author_rows=*/false);
    cache_.write_batch_base(*batch_writes_, in.layer, k, in.v);
    if (in.k_base.defined()) {
      if (!author_batch_writes_) author_batch_writes_ = plan_batch_writes(plan, /*author_rows=*/true);
      cache_.write_batch_base(*author_batch_writes_, in.layer, keys_before_rope() ? in.k_base_before_rope : in.k_base,
                              in.v_base);
    }
    for (size_t i = 0; i < items_.size(); ++i) {
      const Item& it = items_[i];
      const int64_t row0 = plan.offsets[i];
      for (size_t f = 0; f < it.fills.size(); ++f) {
        const Fill& fill = it.fills[f];
        write_residual(in, writes_[i], f, *fill.stream, row0 + fill.from - it.start, it.end - fill.from);
      }
      for (size_t f = 0; f < it.author_fills.size(); ++f) {
        write_residual(in, author_writes_[i], f, *it.author_fills[f], row0, it.end - it.start);
      }
    }
  }

  // C = X A^T of the batch's rows [row, row + n) into residual append `f` of `writes`.
  void write_residual(const LayerAttentionInput& in, const cache::WritePlan& writes, size_t f, const ReaderStream& s,
                      int64_t row, int64_t n) {
    const at::Tensor& a = s.a[static_cast<size_t>(in.layer)];  // [rank, hidden]
    if (a.defined()) cache_.write_residual(writes, f, in.layer, at::matmul(in.x.narrow(0, row, n), a.t()));  // [n, rank]
  }

  // Each item's base rows (or its author rows): its slots, and its rows' place in the step's batch.
  cache::BatchWritePlan plan_batch_writes(const StepPlan& plan, bool author_rows) const {
    std::vector<cache::BatchAppend> appends;
    for (size_t i = 0; i < items_.size(); ++i) {
      const Item& it = items_[i];
      if (author_rows) {
        if (it.author_slots) appends.push_back({&*it.author_slots, plan.offsets[i]});
        continue;
      }
      if (it.base_from >= it.end) continue;
      LORAKV_ASSERT(it.slots, "an item writing base rows without reserved slots");
      appends.push_back({&*it.slots, plan.offsets[i] + it.base_from - it.start});
    }
    return cache_.plan_batch_writes(appends);
  }

  // The layer's pointers into the step's plan: views, q, out, B.
  void fill_layer(const LayerAttentionInput& in, const StepPlan& plan) {
    const int64_t layer = in.layer;
    for (size_t b = 0; b < bases_.size(); ++b) bases_[b].rows = views_.base_rows(base_reads_[b], layer);
    bool needs_rope = false;
    for (size_t pos = 0; pos < order_.size(); ++pos) {
      const size_t i = order_[pos];
      const ItemReads& r = reads_[i];
      const int64_t row0 = plan.offsets[i], n = plan.offsets[i + 1] - row0;
      kernels::AgentAttention& a = agents_[pos];
      a = kernels::AgentAttention{};
      a.num_queries = n;
      a.q = static_cast<const char*>(in.q.data_ptr()) + row0 * in.q.stride(0) * in.q.element_size();
      a.q_dtype = element_type(in.q);
      a.q_row_stride = in.q.stride(0);
      a.q_head_stride = in.q.stride(1);
      a.q_positions = plan.positions.data_ptr<int64_t>() + row0;
      a.out = static_cast<char*>(in.out.data_ptr()) + row0 * in.out.stride(0) * in.out.element_size();
      a.out_dtype = element_type(in.out);
      a.out_row_stride = in.out.stride(0);
      a.out_head_stride = in.out.stride(1);
      for (const auto& [s, read] : r.streams) {
        const at::Tensor& b = s->b[static_cast<size_t>(layer)];
        if (!b.defined()) continue;
        const int64_t rank = views_.residual_rank(read, layer);
        const kernels::LowRankStream stream = views_.residual_stream(read, layer, b.data_ptr<float>(), rank * c_.head_dim, c_.head_dim);
        if (s->module == adapters::ModuleId::kV) {
          a.v = stream;
        } else {
          a.k = stream;
          needs_rope = true;
        }
      }
      if (r.private_rows >= 0) a.private_rows = views_.base_rows(r.private_rows, layer);
      if (mass_) a.mass_first_query = mass_first_query_[pos];
      if (mass_ && r.private_rows >= 0) {
        a.private_mass = private_mass_[pos].data();
        a.private_mass_head_stride = private_mass_stride_[pos];
      }
    }
    for (size_t b = 0; mass_ && b < bases_.size(); ++b) {
      std::fill(base_mass_[b].begin(), base_mass_[b].end(), 0.f);  // rows no query sees stay 0
      bases_[b].mass = base_mass_[b].data();
      bases_[b].mass_head_stride = base_mass_stride_[b];
      bases_[b].mass_agent_stride = params_.mass == kernels::AttentionMass::kPerAgent ? c_.num_kv_heads * base_mass_stride_[b] : 0;
    }
    needs_rope = needs_rope || keys_before_rope();
    params_.rope_cos = needs_rope ? cos_.data_ptr<float>() : nullptr;
    params_.rope_sin = needs_rope ? sin_.data_ptr<float>() : nullptr;
    params_.rope_rows = needs_rope ? cos_.size(0) : 0;
  }

  cache::PagedKvCache& cache_;
  const ModelConfig& c_;
  std::vector<Item>& items_;
  const at::Tensor& cos_;
  const at::Tensor& sin_;
  double scale_;
  StepStats& stats_;
  cache::StepViews views_;
  std::vector<size_t> order_;                 // items by the base they read
  std::vector<ItemReads> reads_;              // per item
  std::vector<cache::WritePlan> writes_;      // per item (residual rows)
  std::optional<cache::BatchWritePlan> batch_writes_;  // every item's base rows, made at the first layer
  std::vector<cache::WritePlan> author_writes_;  // per item: its author rows' residual rows
  std::optional<cache::BatchWritePlan> author_batch_writes_;  // every item's author base rows
  std::vector<kernels::SharedBase> bases_;    // the kernel's bases; rows refilled per layer
  std::vector<int64_t> base_reads_;           // per base: its StepViews read
  std::vector<kernels::AgentAttention> agents_;  // per item in `order_`, refilled per layer
  kernels::LoraAttentionParams params_;
  kernels::LoraAttentionPlan kernel_plan_;      // made by the first layer, run by the layers of its shape
  std::vector<ScoredSeq> scored_;               // sequences whose rows a scoring policy governs
  std::vector<SeqId> accumulating_;             // of those, the ones whose scores grow this step
  std::vector<SeqId> observed_;                 // of those, the ones observed afresh (SnapKV)
  std::vector<int64_t> mass_first_query_;       // per agent in `order_`
  std::vector<uint8_t> scores_from_;            // per agent in `order_`: its mass adds to scores
  std::vector<size_t> base_of_agent_;           // per agent in `order_`: its index in bases_
  bool mass_ = false;                           // the kernel returns mass this step
  bool bound_mass_ = false;                     // some agent reads a sequence kept for the loss bound
  std::vector<std::vector<float>> base_mass_;   // per base: float32 [num_kv_heads, stride]
  std::vector<int64_t> base_mass_stride_;
  std::vector<std::vector<float>> private_mass_;  // per agent in `order_` (unused: never evicted)
  std::vector<int64_t> private_mass_stride_;
  std::vector<float> lane_mass_;                // scratch: one lane's mass
  std::vector<AnchoredSeq> anchored_;           // capkv's sequences, with this step's queries
  std::vector<SeqId> bounded_;                  // sequences whose contexts ask for the loss bound
  std::vector<StepMass> step_mass_;             // their readers' mass this step
  std::vector<std::pair<int64_t, int64_t>> reader_mass_;  // per agent in `order_`: (step_mass_, reader) or -1
};

}  // namespace

// Rows of `seq`'s first lane (layer 0) with a stored position below `limit`; 0 for no sequence.
static int64_t rows_below(const cache::PagedKvCache& cache, SeqId seq, int64_t limit) {
  if (!seq.valid() || !cache.manager().has_sequence(seq)) return 0;
  return cache.manager().sequence(seq).lanes.front().rows_below(limit);
}

void run_items(const LlamaModel& model, cache::PagedKvCache& cache, Engine::State& st, std::vector<Item>& items,
               StepResult& result, StepEffects& effects) {
  int64_t max_end = 0;
  std::vector<SequenceInput> batch;
  const bool by_row = cache.manager().config().keys_before_rope;
  for (const Item& it : items) {
    SequenceInput in;
    if (by_row) {  // RoPE by the index the item's first row takes among the rows it reads
      in.rope_first_position = rows_below(cache, it.read_seq, it.private_seq.valid() ? it.read_limit : it.start);
      if (it.private_seq.valid()) in.rope_first_position += rows_below(cache, it.private_seq, it.start);
    }
    max_end = std::max(max_end, by_row ? in.rope_first_position + it.end - it.start : it.end);
    in.seq = it.write_seq;
    in.tokens = it.tokens;
    in.adapter = it.adapter;
    in.kv_lora_in_rows = it.kv_lora_in_rows;
    in.base_kv_too = it.author_rows.valid();
    in.activation_applied = it.activation_applied;
    in.first_position = it.start;
    in.all_logits = it.all_logits;
    batch.push_back(std::move(in));
  }
  st.grow_rope(model, max_end);
  std::vector<ScoredSeq> scored;
  for (const auto& [id, c] : st.contexts) {
    if (!c.policy) continue;
    const cache::eviction::ScoreSource source = c.policy->score_source();
    if (source != cache::eviction::ScoreSource::kAccumulatedMass && source != cache::eviction::ScoreSource::kObservationMass) continue;
    const int64_t window = source == cache::eviction::ScoreSource::kObservationMass ? c.options.eviction.window : 0;
    const std::string readers = c.options.eviction.resolved_scoring();
    const ScoredSeq::Readers how = readers == "max"      ? ScoredSeq::Readers::kMax
                                   : readers == "writer" ? ScoredSeq::Readers::kWriter
                                                         : ScoredSeq::Readers::kSum;
    for (SeqId seq : c.evictable_seqs()) scored.push_back({seq, window, how});
  }
  // capkv's sequences that this step writes: their queries go into the context's anchor once
  // the step commits (a step that throws adds none).
  std::vector<AnchoredSeq> anchored;
  for (auto& [id, c] : st.contexts) {
    if (!c.needs_query_anchor()) continue;
    for (SeqId seq : c.evictable_seqs()) {
      const bool written = std::any_of(items.begin(), items.end(), [&](const Item& it) { return it.write_seq == seq && it.base_from < it.end; });
      if (written) anchored.push_back({seq, c.options.eviction.sinks, c.query_anchor(seq), {}, 0});
    }
  }
  std::vector<SeqId> bounded;  // the loss bound's sequences
  for (const auto& [id, c] : st.contexts) {
    if (!c.policy || !c.options.eviction.loss_bound) continue;
    for (SeqId seq : c.evictable_seqs()) bounded.push_back(seq);
  }
  PagedAttention backend(cache, model.config(), items, st.rope_cos, st.rope_sin, model.attention_scale(), result.stats,
                         std::move(scored), std::move(anchored), std::move(bounded));
  // Logits rows: every token of the items that asked for them, the last of the others.
  const at::Tensor logits = model.forward(batch, backend);
  for (AnchoredSeq& a : backend.anchored()) {
    QueryAnchor after = *a.anchor;  // shares the sum; add() replaces it out of place
    after.add(a.step_sum, a.step_count);
    effects.anchors.emplace_back(a.anchor, std::move(after));
  }
  effects.mass = std::move(backend.step_mass());

  int64_t row = 0;
  for (const Item& it : items) {
    const int64_t n = it.all_logits ? it.end - it.start : 1;
    if (it.work != kNoWork) {
      // An aLoRA reader's private work may run as two items (before and from its invocation):
      // one output, the items' rows in order.
      StepOutput& out = result.outputs[it.work];
      const bool continues = out.tokens_processed > 0;
      const at::Tensor mine = logits.narrow(0, row, n);
      out.logits = continues && it.all_logits ? at::cat({out.logits, mine}) : mine;
      if (!continues) out.first_position = it.start;
      out.tokens_processed += it.end - it.start;
    }
    row += n;
  }
}

}  // namespace lorakv::runtime

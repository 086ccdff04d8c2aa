// tests/runtime/eviction_bound_test.cpp: the eviction loss bound (runtime/eviction_bound.h)
// and the decode-time window that grows with the output (EvictionConfig::window_growth).
//   - eviction_loss_bound on a hand-filled cache against the formula written out with loops
//     in double: base values, a V residual bounded through its rank, a reader that read
//     fewer rows, a reader whose private rows hold the largest value;
//   - the engine's StepStats::loss_bound against a direct computation: a reference attention
//     backend runs the same chunks on a contiguous copy of the rows the engine keeps, takes
//     every query's weights, and sums the bound over the rows the engine evicted (streaming_llm,
//     h2o, and snapkv, whose bound covers its observation window's queries); every query's
//     actual output change (weights renormalised over the kept rows) stays under its bound;
//   - window_growth: during replies the newest rows stay, an append starts over.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/eviction_bound.h"
#include "tests/runtime/tiny_engine_model.h"
#include "tests/runtime/step_then_evict.h"

namespace lorakv::runtime {
namespace {

// ---- eviction_loss_bound on a hand-filled cache ---------------------------------------

constexpr int64_t kHeads = 2, kDim = 4, kRank = 2, kRows = 6, kQueryHeadsPerKv = 3;

at::Tensor seeded(std::vector<int64_t> sizes, uint32_t seed) { return lorakv::testing::seeded_uniform(std::move(sizes), seed, 1.0f); }

struct HandCache {
  cache::PagedKvCache cache;
  cache::ContentKey base = cache::ContentKey::base(cache::StorageDtype::kFloat32);
  cache::ContentKey residual =
      cache::ContentKey::residual(cache::StreamKind::kResidualV, cache::StorageDtype::kFloat32, AdapterIdentity{7, 7});
  at::Tensor v, c, private_v;  // float32 [kRows, kHeads, kDim], [kRows, kRank], [2, kHeads, kDim]

  static cache::CacheConfig config() {
    cache::CacheConfig c;
    c.layout = {1, kHeads, kDim, 4, kHeads};  // one layer, one lane holding both KV heads
    c.num_base_blocks = 16;
    c.residual_pools = {{kRank, 16}};
    return c;
  }

  HandCache() : cache(config()) {
    v = seeded({kRows, kHeads, kDim}, 1);
    c = seeded({kRows, kRank}, 2);
    private_v = seeded({2, kHeads, kDim}, 3) * 5;  // larger than any shared row
    cache.create_sequence(SeqId(1), base);
    cache.attach_residual(SeqId(1), residual, {kRank}, {});
    auto slots = cache.append(SeqId(1), {{1, 2, 3, 4, 5, 6}, AdapterIdentity::base_model(), {{residual, kRows}}});
    EXPECT_TRUE(slots);
    cache.write_base(*slots, 0, seeded({kRows, kHeads, kDim}, 4), v);
    cache.write_residual(*slots, 0, 0, c);
    cache.create_sequence(SeqId(2), base);
    auto priv = cache.append(SeqId(2), {{7, 8}, AdapterIdentity::base_model(), {}});
    EXPECT_TRUE(priv);
    cache.write_base(*priv, 0, seeded({2, kHeads, kDim}, 5), private_v);
  }
};

// The bound written out: per reader and KV head, sum over evicted rows it read of m * |v|,
// plus their summed mass times the largest |v| among kept rows it read and its private rows.
double expected_bound(const HandCache& h, const std::vector<int64_t>& kept, const at::Tensor& b, const at::Tensor& mass,
                      int64_t rows_read, bool with_residual, bool with_private) {
  double total = 0;
  for (int64_t head = 0; head < kHeads; ++head) {
    auto norm = [&](int64_t row) {
      double n = 0;
      for (int64_t d = 0; d < kDim; ++d) n += std::abs(h.v[row][head][d].item<double>());
      for (int64_t r = 0; with_residual && r < kRank; ++r) {
        double b_norm = 0;
        for (int64_t d = 0; d < kDim; ++d) b_norm += std::abs(b[head][r][d].item<double>());
        n += std::abs(h.c[row][r].item<double>()) * b_norm;
      }
      return n;
    };
    double largest = 0, evicted_mass = 0, term = 0;
    for (int64_t row = 0; with_private && row < 2; ++row) {
      double n = 0;
      for (int64_t d = 0; d < kDim; ++d) n += std::abs(h.private_v[row][head][d].item<double>());
      largest = std::max(largest, n);
    }
    for (int64_t row = 0; row < rows_read; ++row) {
      if (std::find(kept.begin(), kept.end(), row) != kept.end()) {
        largest = std::max(largest, norm(row));
      } else {
        evicted_mass += mass[head][row].item<double>();
        term += mass[head][row].item<double>() * norm(row);
      }
    }
    total += term + evicted_mass * largest;
  }
  return total;
}

ReaderMass reader_mass(const at::Tensor& mass, int64_t rows_read) {
  ReaderMass m;
  m.queries = 3;
  m.stride = kRows;
  const at::Tensor flat = mass.contiguous();
  m.mass = {std::vector<float>(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel())};
  m.rows_read = {{rows_read}};
  return m;
}

TEST(EvictionLossBound, EqualsTheFormulaWithResidualsPrivateRowsAndShorterReads) {
  const HandCache h;
  ReaderStream stream;
  stream.key = h.residual;
  stream.module = adapters::ModuleId::kV;
  stream.ranks = {kRank};
  stream.b = {seeded({kHeads, kRank, kDim}, 6)};
  const at::Tensor mass_a = seeded({kHeads, kRows}, 7).abs(), mass_b = seeded({kHeads, kRows}, 8).abs();
  const cache::KeepSets keep = {{0, 2, 5}};

  StepMass step;
  step.seq = SeqId(1);
  step.readers.push_back(reader_mass(mass_a, kRows));  // reads the V residual and has private rows
  step.readers.back().value_stream = &stream;
  step.readers.back().private_seq = SeqId(2);
  step.readers.push_back(reader_mass(mass_b, 4));  // base values, rows 0..3 only
  const LossBound got = eviction_loss_bound(h.cache, SeqId(1), keep, step, kQueryHeadsPerKv);

  const double want = expected_bound(h, keep[0], stream.b[0], mass_a, kRows, true, true) +
                      expected_bound(h, keep[0], stream.b[0], mass_b, 4, false, false);
  EXPECT_NEAR(got.sum, want, 1e-5 * want);  // float32 norms and mass, summed in double
  EXPECT_EQ(got.terms, 2 * 3 * kQueryHeadsPerKv * kHeads);
  // Each ingredient moves the result: the residual term, the private rows, the shorter read.
  EXPECT_GT(std::abs(want - (expected_bound(h, keep[0], stream.b[0], mass_a, kRows, false, true) +
                             expected_bound(h, keep[0], stream.b[0], mass_b, 4, false, false))), 1e-2 * want);
  EXPECT_GT(std::abs(want - (expected_bound(h, keep[0], stream.b[0], mass_a, kRows, true, false) +
                             expected_bound(h, keep[0], stream.b[0], mass_b, 4, false, false))), 1e-2 * want);
  EXPECT_GT(std::abs(want - (expected_bound(h, keep[0], stream.b[0], mass_a, kRows, true, true) +
                             expected_bound(h, keep[0], stream.b[0], mass_b, kRows, false, false))), 1e-3 * want);
}

// ---- the engine's bound against a direct computation ----------------------------------

// Attention on a contiguous copy of the rows the engine keeps, recording each layer's
// weights. Rows per layer: K, V float32 [N, head_dim] (one KV head), their positions.
class ReferenceAttention final : public AttentionBackend {
 public:
  struct Layer {
    at::Tensor k, v;                // float32 [N, head_dim]
    std::vector<int64_t> positions; // per row
    at::Tensor weights;             // float64 [T, heads, N]: the step's queries over every row they read
    at::Tensor out;                 // float64 [T, heads, head_dim]
  };
  ReferenceAttention(int64_t layers, double scale) : layers_(static_cast<size_t>(layers)), scale_(scale) {}

  void attend(const LayerAttentionInput& in, const StepPlan& plan) override {
    Layer& l = layers_[static_cast<size_t>(in.layer)];
    const at::Tensor k = in.k.select(1, 0).to(at::kFloat), v = in.v.select(1, 0).to(at::kFloat);
    l.k = l.k.defined() ? at::cat({l.k, k}) : k.clone();
    l.v = l.v.defined() ? at::cat({l.v, v}) : v.clone();
    const int64_t t = in.q.size(0), n = l.k.size(0);
    for (int64_t i = 0; i < t; ++i) l.positions.push_back(plan.positions[i].item<int64_t>());
    const at::Tensor q = in.q.to(at::kDouble);                                         // [T, heads, D]
    at::Tensor scores = at::einsum("thd,nd->thn", {q, l.k.to(at::kDouble)}) * scale_;  // [T, heads, N]
    const at::Tensor row_pos = at::tensor(l.positions, at::kLong);
    const at::Tensor query_pos = plan.positions.to(at::kLong);
    const at::Tensor future = row_pos.view({1, 1, n}) > query_pos.view({t, 1, 1});
    scores = scores.masked_fill(future, -INFINITY);
    l.weights = at::softmax(scores, -1);
    l.out = at::einsum("thn,nd->thd", {l.weights, l.v.to(at::kDouble)});
    in.out.copy_(l.out.to(in.out.scalar_type()));
  }

  // Keeps only the rows at `kept` positions of each layer.
  void keep_only(const std::vector<std::vector<int32_t>>& kept) {
    for (size_t layer = 0; layer < layers_.size(); ++layer) {
      Layer& l = layers_[layer];
      const std::set<int64_t> keep(kept[layer].begin(), kept[layer].end());
      std::vector<int64_t> index, positions;
      for (size_t r = 0; r < l.positions.size(); ++r) {
        if (keep.count(l.positions[r])) {
          index.push_back(static_cast<int64_t>(r));
          positions.push_back(l.positions[r]);
        }
      }
      const at::Tensor idx = at::tensor(index, at::kLong);
      l.k = l.k.index_select(0, idx);
      l.v = l.v.index_select(0, idx);
      l.positions = positions;
    }
  }

  const Layer& layer(int64_t i) const { return layers_[static_cast<size_t>(i)]; }

 private:
  std::vector<Layer> layers_;
  double scale_;
};

struct DirectBound {
  double bound = 0;
  int64_t terms = 0;
  int64_t queries_checked = 0;
  double largest_ratio = 0;  // max over queries of actual change / its bound
  double actual = 0;         // the actual changes, summed
};

// The bound of the step's queries from `first_query` on, had the rows not in `kept` been
// absent; checks each query's actual change against its own bound.
DirectBound direct_bound(const ReferenceAttention& ref, const std::vector<std::vector<int32_t>>& kept, int64_t layers,
                         int64_t first_query) {
  DirectBound out;
  for (int64_t layer = 0; layer < layers; ++layer) {
    const ReferenceAttention::Layer& l = ref.layer(layer);
    const std::set<int64_t> keep(kept[static_cast<size_t>(layer)].begin(), kept[static_cast<size_t>(layer)].end());
    const at::Tensor norms = l.v.to(at::kDouble).abs().sum(-1);  // [N]
    const int64_t n = norms.size(0);
    std::vector<uint8_t> is_kept(static_cast<size_t>(n));
    double largest_kept = 0;
    for (int64_t r = 0; r < n; ++r) {
      is_kept[static_cast<size_t>(r)] = keep.count(l.positions[static_cast<size_t>(r)]) > 0;
      if (is_kept[static_cast<size_t>(r)]) largest_kept = std::max(largest_kept, norms[r].item<double>());
    }
    const at::Tensor kept_mask = at::tensor(std::vector<double>(is_kept.begin(), is_kept.end()), at::kDouble);
    for (int64_t t = first_query; t < l.weights.size(0); ++t) {
      for (int64_t h = 0; h < l.weights.size(1); ++h) {
        const at::Tensor a = l.weights[t][h];  // [N]
        const double evicted_mass = (a * (1 - kept_mask)).sum().item<double>();
        const double bound = (a * (1 - kept_mask) * norms).sum().item<double>() + evicted_mass * largest_kept;
        const at::Tensor a_kept = a * kept_mask;
        const at::Tensor renormalised = at::matmul(a_kept / a_kept.sum(), l.v.to(at::kDouble));
        const double actual = (l.out[t][h] - renormalised).abs().sum().item<double>();
        EXPECT_LE(actual, bound * (1 + 1e-9) + 1e-12) << "layer " << layer << " query " << t << " head " << h;
        if (bound > 0) out.largest_ratio = std::max(out.largest_ratio, actual / bound);
        out.bound += bound;
        out.actual += actual;
        ++out.terms;
        ++out.queries_checked;
      }
    }
  }
  return out;
}

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 48);
  return t;
}

// Pools far above what the tests hold, in blocks of 4 rows (so evictions drop whole blocks).
EngineOptions small_pools() {
  EngineOptions eo;
  eo.base_rows = 512;
  eo.residual_rows = 512;
  eo.block_size = 4;
  return eo;
}

class EngineLossBound : public ::testing::Test {
 protected:
  void SetUp() override { tiny_ = lorakv::testing::make_tiny_engine_model(); }
  const LlamaModel& model() const { return *tiny_.model; }

  // Chunks of 8 tokens through the engine (one base reader, `full`) and through the
  // reference on the rows the engine keeps; after each step that evicts, the engine's bound
  // against the direct one over the queries whose mass the kernel returned.
  void run(const std::string& policy, int64_t observed_queries) {
    constexpr int64_t kChunk = 8, kSteps = 6;
    Engine engine(model(), small_pools());
    cache::eviction::EvictionConfig e;
    e.policy = policy;
    e.budget_tokens = 12;
    e.sinks = 2;
    e.window = 4;
    e.loss_bound = true;
    const ContextId ctx = engine.create_context({SharingMode::kFull, SharedWriter::kFirst, e}, {nullptr});
    const std::vector<int32_t> tokens = random_tokens(kChunk * kSteps, 21);
    engine.append(ctx, tokens);
    const int64_t layers = model().config().num_layers;
    ReferenceAttention ref(layers, model().attention_scale());
    int64_t evicting_steps = 0;
    double bound_sum = 0, actual_sum = 0, largest_ratio = 0;
    for (int64_t s = 0; s < kSteps; ++s) {
      const StepResult r = lorakv::testing::step_then_evict(engine, {StepWork{{ctx, 0}, StepWork::Kind::kContext, {}, kChunk, false}});
      ASSERT_TRUE(r.ok);
      SequenceInput in;
      in.seq = SeqId(0);
      in.tokens.assign(tokens.begin() + s * kChunk, tokens.begin() + (s + 1) * kChunk);
      in.first_position = s * kChunk;
      (void)model().forward({in}, ref);
      const std::vector<std::vector<int32_t>> kept = engine.kept_positions(ctx);
      if (r.stats.rows_evicted == 0) {
        EXPECT_EQ(r.stats.loss_bound_terms, 0) << "step " << s;
        ref.keep_only(kept);
        continue;
      }
      ++evicting_steps;
      const int64_t first = observed_queries > 0 ? kChunk - observed_queries : 0;
      const DirectBound want = direct_bound(ref, kept, layers, first);
      EXPECT_EQ(r.stats.loss_bound_terms, want.terms) << policy << " step " << s;
      // float32 mass and norms (each within a few ulps) summed over ~200 terms.
      EXPECT_NEAR(r.stats.loss_bound, want.bound, 1e-4 * want.bound + 1e-6) << policy << " step " << s;
      EXPECT_GT(want.bound, 0) << "rows with mass left";
      EXPECT_LT(want.largest_ratio, 1.0);
      bound_sum += want.bound;
      actual_sum += want.actual;
      largest_ratio = std::max(largest_ratio, want.largest_ratio);
      ref.keep_only(kept);
    }
    EXPECT_GE(evicting_steps, 4) << policy;
    // The bound beside the change it bounds (printed for docs/eviction.md).
    std::printf("%s: bound summed over the queries %.3f, actual change summed %.3f (ratio %.3f), largest per-query ratio %.3f\n",
                policy.c_str(), bound_sum, actual_sum, actual_sum / bound_sum, largest_ratio);
  }

  lorakv::testing::TinyEngineModel tiny_;
};

TEST_F(EngineLossBound, StreamingLlmEqualsTheDirectComputation) { run("streaming_llm", 0); }
TEST_F(EngineLossBound, H2oEqualsTheDirectComputation) { run("h2o", 0); }
TEST_F(EngineLossBound, SnapKvBoundsItsObservationWindowsQueries) { run("snapkv", 4); }

TEST_F(EngineLossBound, OffByDefault) {
  Engine engine(model(), small_pools());
  cache::eviction::EvictionConfig e;
  e.policy = "streaming_llm";
  e.budget_tokens = 8;
  const ContextId ctx = engine.create_context({SharingMode::kFull, SharedWriter::kFirst, e}, {nullptr});
  engine.append(ctx, random_tokens(24, 3));
  const StepResult r = lorakv::testing::step_then_evict(engine, {StepWork{{ctx, 0}, StepWork::Kind::kContext, {}, 24, false}});
  ASSERT_TRUE(r.ok);
  EXPECT_GT(r.stats.rows_evicted, 0);
  EXPECT_EQ(r.stats.loss_bound_terms, 0) << "no bound unless asked";
  EXPECT_EQ(r.stats.loss_bound, 0);
}

// ---- window_growth ---------------------------------------------------------------------

TEST(EvictionWindowGrowth, ProtectsTheNewestRowsOfTheOutput) {
  cache::eviction::EvictionConfig e;
  e.policy = "h2o";
  e.budget_tokens = 8;
  e.sinks = 1;
  e.window = 2;
  e.window_growth = 0.5;
  EXPECT_EQ(e.window_extra(0), 0);
  EXPECT_EQ(e.window_extra(5), 2);
  EXPECT_EQ(e.window_extra(6), 3);
  const auto policy = cache::eviction::make_policy(e);
  cache::eviction::LaneCandidates lane;
  for (int32_t p = 0; p < 12; ++p) lane.positions.push_back(p);
  lane.scores = {9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 1, 1};  // h2o alone would keep the oldest
  const std::vector<int64_t> fixed = policy->keep(lane, 8);
  EXPECT_EQ(fixed, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 10, 11}));
  lane.window_extra = e.window_extra(6);  // 3 more newest rows
  const std::vector<int64_t> grown = policy->keep(lane, 8);
  EXPECT_EQ(grown, (std::vector<int64_t>{0, 1, 2, 7, 8, 9, 10, 11}));
  e.window_growth = -1;
  EXPECT_THROW(e.check(), ConfigError);
}

TEST_F(EngineLossBound, WindowGrowthKeepsTheReplysNewestRowsUntilTheNextAppend) {
  // A base reader replies token by token; with growth 1 the reply's rows are all protected
  // (up to the budget less sinks and window); without growth h2o drops the newest (they have
  // had the least attention). An append ends the reply: the extra rows are no longer protected.
  auto newest_kept = [&](double growth, bool append_after) {
    Engine engine(model(), small_pools());
    cache::eviction::EvictionConfig e;
    e.policy = "h2o";
    e.budget_tokens = 16;
    e.sinks = 1;
    e.window = 1;
    e.window_growth = growth;
    const ContextId ctx = engine.create_context({SharingMode::kFull, SharedWriter::kFirst, e}, {nullptr});
    engine.append(ctx, random_tokens(24, 9));
    prefill(engine, {ctx, 0});
    const std::vector<int32_t> reply = random_tokens(8, 10);
    for (int32_t t : reply) {
      EXPECT_TRUE(lorakv::testing::step_then_evict(engine, {StepWork{{ctx, 0}, StepWork::Kind::kPrivate, {t}, 0, false}}).ok);
    }
    engine.commit_private({ctx, 0});
    // A step (here with nothing to process) evicts what the committed reply brought.
    EXPECT_TRUE(lorakv::testing::step_then_evict(engine, {StepWork{{ctx, 0}, StepWork::Kind::kContext, {}, 0, false}}).ok);
    if (append_after) {
      engine.append(ctx, random_tokens(1, 11));
      prefill(engine, {ctx, 0});
    }
    // How many of the reply's 8 positions (24..31) every lane still shows.
    int64_t fewest = 8;
    for (const std::vector<int32_t>& lane : engine.kept_positions(ctx)) {
      fewest = std::min<int64_t>(fewest, std::count_if(lane.begin(), lane.end(), [](int32_t p) { return p >= 24 && p < 32; }));
    }
    return fewest;
  };
  EXPECT_EQ(newest_kept(1.0, false), 8);
  EXPECT_LT(newest_kept(0.0, false), 8);
  EXPECT_LT(newest_kept(1.0, true), 8);
}

}  // namespace
}  // namespace lorakv::runtime

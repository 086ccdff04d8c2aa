// tests/runtime/engine_eviction_test.cpp: the engine keeping contexts within a token budget,
// on the tiny model (tests/runtime/tiny_engine_model.h).
//   - streaming_llm through the paged cache (blocks dropped, rows masked) gives, chunk by
//     chunk, the logits of the contiguous reference path whose cache physically deletes the
//     rows an independent rule says go (sinks + the newest budget - sinks positions);
//   - H2O's scores are the kernel's attention mass: before any eviction every query adds
//     one unit per query head of a lane's KV group, and what H2O keeps is the top of them;
//   - a long randomized multi-agent session (three readers of one base_lr_shared context,
//     replies committed, text appended in chunks) keeps, after every step, exactly the
//     positions the independent rule keeps in every lane, and the pools' bytes stay within
//     the closed-form bound (memory returns), with the readers' residual rows aligned (the
//     kernel refuses a read otherwise).
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/kv_cache.h"
#include "tests/runtime/tiny_engine_model.h"
#include "tests/support/reference_values.h"
#include "tests/runtime/step_then_evict.h"

namespace lorakv::runtime {
namespace {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;
using lorakv::testing::kFloat32LogitsTolerance;
using lorakv::testing::relative_error;

constexpr int64_t kSinks = 4, kWindow = 8, kBudget = 40, kBlock = 16;

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 48);
  return t;
}

cache::eviction::EvictionConfig streaming(int64_t budget = kBudget) {
  cache::eviction::EvictionConfig c;
  c.policy = "streaming_llm";
  c.budget_tokens = budget;
  c.sinks = kSinks;
  c.window = kWindow;
  return c;
}

// The independent rule: StreamingLLM keeps the sinks and the newest budget - sinks positions.
std::vector<int32_t> streaming_keeps(int64_t tokens, int64_t budget = kBudget) {
  std::vector<int32_t> kept;
  for (int64_t p = 0; p < tokens; ++p) {
    if (tokens <= budget || p < kSinks || p >= tokens - (budget - kSinks)) kept.push_back(static_cast<int32_t>(p));
  }
  return kept;
}

// The reference cache: contiguous rows per layer, from which evicted rows are deleted. New
// tokens go at the next position (length() counts positions, not rows).
class EvictingKvCache final : public KvCache {
 public:
  explicit EvictingKvCache(const ModelConfig& c) : c_(c) {}
  int64_t length(SeqId seq) const override {
    auto it = seqs_.find(seq);
    return it == seqs_.end() ? 0 : it->second.next_position;
  }
  void append(SeqId seq, int64_t layer, const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions) override {
    Rows& r = rows(seq, layer);
    const at::Tensor k_rows = k.permute({1, 0, 2});  // [kv_heads, T, head_dim]
    const at::Tensor v_rows = v.permute({1, 0, 2});
    r.k = r.k.defined() ? at::cat({r.k, k_rows}, 1).contiguous() : k_rows.contiguous();
    r.v = r.v.defined() ? at::cat({r.v, v_rows}, 1).contiguous() : v_rows.contiguous();
    r.positions = r.positions.defined() ? at::cat({r.positions, positions}) : positions.clone();
    pending_[seq] = positions.size(0);
  }
  KvView view(SeqId seq, int64_t layer) const override {
    const Rows& r = seqs_.at(seq).layers.at(static_cast<size_t>(layer));
    const at::Tensor p32 = r.positions.to(at::kInt).unsqueeze(0).expand({c_.num_kv_heads, -1}).contiguous();
    return {r.k, r.v, r.positions, p32};
  }
  void commit(SeqId seq) override { seqs_[seq].next_position += pending_[seq]; }
  void release(SeqId seq) override { seqs_.erase(seq); }
  // Deletes every row whose position is not in `kept`.
  void keep_only(SeqId seq, const std::vector<int32_t>& kept) {
    const at::Tensor keep_positions = at::tensor(std::vector<int64_t>(kept.begin(), kept.end()), at::kLong);
    for (Rows& r : seqs_.at(seq).layers) {
      const at::Tensor index = at::nonzero(at::isin(r.positions, keep_positions)).flatten();
      r.k = r.k.index_select(1, index).contiguous();
      r.v = r.v.index_select(1, index).contiguous();
      r.positions = r.positions.index_select(0, index);
    }
  }

 private:
  struct Rows {
    at::Tensor k, v;       // float [kv_heads, N, head_dim]
    at::Tensor positions;  // int64 [N]
  };
  struct Seq {
    std::vector<Rows> layers;
    int64_t next_position = 0;
  };
  Rows& rows(SeqId seq, int64_t layer) {
    Seq& s = seqs_[seq];
    if (s.layers.empty()) s.layers.resize(static_cast<size_t>(c_.num_layers));
    return s.layers[static_cast<size_t>(layer)];
  }
  const ModelConfig& c_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::unordered_map<SeqId, int64_t> pending_;
};

// The positions lane `lane` of `seq` still shows (live rows).
std::vector<int32_t> live_positions(const Engine& e, SeqId seq, int64_t lane) {
  const cache::BaseLane& l = e.cache().manager().sequence(seq).lanes.at(static_cast<size_t>(lane));
  std::vector<int32_t> out;
  for (int64_t r = 0; r < l.table.num_rows; ++r) {
    if (l.is_live(r)) out.push_back(l.positions[static_cast<size_t>(r)]);
  }
  return out;
}

class EngineEviction : public ::testing::Test {
 protected:
  void SetUp() override { tiny_ = lorakv::testing::make_tiny_engine_model(); }
  const LlamaModel& model() const { return *tiny_.model; }
  static EngineOptions pools(int64_t rows = 1024) {
    EngineOptions eo;
    eo.base_rows = rows;
    eo.residual_rows = rows;
    eo.block_size = kBlock;
    return eo;
  }
  lorakv::testing::TinyEngineModel tiny_;
};

TEST_F(EngineEviction, StreamingLlmEqualsAReferenceThatDeletesTheRows) {
  Engine engine(model(), pools());
  ContextOptions options{SharingMode::kFull, SharedWriter::kFirst, streaming()};
  const ContextId ctx = engine.create_context(options, {nullptr});
  EvictingKvCache reference(model().config());
  const std::vector<int32_t> text = random_tokens(150, 7);
  const int64_t chunk = 13;  // never a block's multiple: evictions land mid-block
  int64_t done = 0;
  int64_t steps_with_eviction = 0;
  while (done < static_cast<int64_t>(text.size())) {
    const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(text.size()) - done);
    const std::vector<int32_t> piece(text.begin() + done, text.begin() + done + n);
    engine.append(ctx, piece);
    StepWork w;
    w.reader = {ctx, 0};
    w.max_tokens = n;
    w.all_logits = true;
    const StepResult r = lorakv::testing::step_then_evict(engine, {w});
    ASSERT_TRUE(r.ok);
    steps_with_eviction += r.stats.rows_evicted > 0;
    const at::Tensor ref = model().forward({{SeqId(0), piece, nullptr}}, reference, {/*all_logits=*/true});
    done += n;
    reference.keep_only(SeqId(0), streaming_keeps(done));
    ASSERT_LT(relative_error(r.outputs[0].logits, ref), kFloat32LogitsTolerance) << "after " << done << " tokens";
  }
  EXPECT_GE(steps_with_eviction, 8);
  // Decode-like steps: one token at a time through the context.
  for (int32_t t : random_tokens(40, 8)) {
    engine.append(ctx, {t});
    StepWork w;
    w.reader = {ctx, 0};
    const StepResult r = lorakv::testing::step_then_evict(engine, {w});
    const at::Tensor ref = model().forward({{SeqId(0), {t}, nullptr}}, reference, {});
    reference.keep_only(SeqId(0), streaming_keeps(++done));
    ASSERT_LT(relative_error(r.outputs[0].logits, ref), kFloat32LogitsTolerance) << "after " << done << " tokens";
  }
}

TEST_F(EngineEviction, H2oScoresAreTheAttentionMassAndItKeepsTheHeaviest) {
  Engine engine(model(), pools());
  cache::eviction::EvictionConfig h2o = streaming(60);
  h2o.policy = "h2o";
  const ContextId ctx = engine.create_context({SharingMode::kFull, SharedWriter::kFirst, h2o}, {nullptr});
  engine.append(ctx, random_tokens(50, 9));
  prefill(engine, {ctx, 0});
  const ReaderRef reader{ctx, 0};
  const ModelConfig& c = model().config();
  const SeqId seq = engine.cache().manager().sequences().front();
  // Below the budget nothing is evicted, so every query's mass is still there: each of the
  // 50 queries gives one unit per query head of the lane's KV group.
  for (int64_t lane = 0; lane < engine.cache().layout().num_lanes(); ++lane) {
    const std::vector<float>& scores = engine.cache().manager().sequence(seq).lanes[static_cast<size_t>(lane)].scores;
    ASSERT_EQ(scores.size(), 50u);
    double sum = 0;
    for (float s : scores) sum += s;
    EXPECT_NEAR(sum, 50.0 * static_cast<double>(c.num_heads / c.num_kv_heads), 1e-3) << "lane " << lane;
  }
  // Past the budget, each lane keeps its sinks, its window and the heaviest of the rest.
  std::vector<std::vector<float>> before;
  for (const cache::BaseLane& l : engine.cache().manager().sequence(seq).lanes) before.push_back(l.scores);
  engine.append(ctx, random_tokens(20, 10));
  StepWork w;
  w.reader = reader;
  const StepResult r = lorakv::testing::step_then_evict(engine, {w});
  EXPECT_GT(r.stats.rows_evicted, 0);
  for (int64_t lane = 0; lane < engine.cache().layout().num_lanes(); ++lane) {
    const std::vector<int32_t> kept = live_positions(engine, seq, lane);
    ASSERT_EQ(static_cast<int64_t>(kept.size()), 60) << "lane " << lane;
    // The scores after the step: the old ones plus this step's mass on rows 0..49.
    const std::vector<float>& now = engine.cache().manager().sequence(seq).lanes[static_cast<size_t>(lane)].scores;
    std::set<int32_t> kept_set(kept.begin(), kept.end());
    // Candidates are positions kSinks .. 70 - kWindow - 1; the policy keeps 60 - 4 - 8 = 48
    // of those 58: every kept candidate scores at least as much as every evicted one.
    float lowest_kept = 1e30f, highest_evicted = -1;
    const cache::BaseLane& l = engine.cache().manager().sequence(seq).lanes[static_cast<size_t>(lane)];
    for (int64_t row = 0; row < l.table.num_rows; ++row) {
      const int32_t p = l.positions[static_cast<size_t>(row)];
      if (p < kSinks || p >= 70 - kWindow) continue;
      if (l.is_live(row)) lowest_kept = std::min(lowest_kept, now[static_cast<size_t>(row)]);
      if (!l.is_live(row)) highest_evicted = std::max(highest_evicted, now[static_cast<size_t>(row)]);
    }
    for (int32_t p = 0; p < kSinks; ++p) EXPECT_TRUE(kept_set.count(p)) << "sink " << p;
    for (int32_t p = 70 - kWindow; p < 70; ++p) EXPECT_TRUE(kept_set.count(p)) << "window " << p;
    if (highest_evicted >= 0) {
      EXPECT_GE(lowest_kept, highest_evicted) << "lane " << lane;
    }
  }
}

TEST_F(EngineEviction, SnapKvScoresAreTheNewestQueriesMassAfterEachChunk) {
  Engine engine(model(), pools());
  cache::eviction::EvictionConfig snap = streaming(60);
  snap.policy = "snapkv";
  const ContextId ctx = engine.create_context({SharingMode::kFull, SharedWriter::kFirst, snap}, {nullptr});
  const ReaderRef reader{ctx, 0};
  const ModelConfig& c = model().config();
  auto run_chunk = [&](int64_t n, uint32_t seed) {
    engine.append(ctx, random_tokens(n, seed));
    StepWork w;
    w.reader = reader;
    w.max_tokens = n;
    return lorakv::testing::step_then_evict(engine, {w});
  };
  ASSERT_TRUE(run_chunk(30, 21).ok);
  ASSERT_TRUE(run_chunk(20, 22).ok);
  const SeqId seq = engine.cache().manager().sequences().front();
  // Below the budget: the scores are the second chunk's last kWindow queries' mass only
  // (the first chunk's are gone), one unit per query head of each query.
  for (const cache::BaseLane& l : engine.cache().manager().sequence(seq).lanes) {
    double sum = 0;
    for (float s : l.scores) sum += s;
    EXPECT_NEAR(sum, static_cast<double>(kWindow * c.num_heads / c.num_kv_heads), 1e-3);
  }
  // Over it: each lane keeps the sinks, the window and the best pooled of the rest.
  const StepResult r = run_chunk(20, 23);
  EXPECT_GT(r.stats.rows_evicted, 0);
  for (int64_t lane = 0; lane < engine.cache().layout().num_lanes(); ++lane) {
    EXPECT_EQ(static_cast<int64_t>(engine.kept_positions(ctx)[static_cast<size_t>(lane)].size()), 60);
  }
  // A decode-like step that writes a row observes again; one that reads only (a private
  // token) leaves the scores as they were.
  const std::vector<float> before = engine.cache().manager().sequence(seq).lanes[0].scores;
  StepWork reply;
  reply.reader = reader;
  reply.kind = StepWork::Kind::kPrivate;
  reply.tokens = {5};
  ASSERT_TRUE(lorakv::testing::step_then_evict(engine, {reply}).ok);
  EXPECT_EQ(engine.cache().manager().sequence(seq).lanes[0].scores, before);
}

// The context's shared rows: the one sequence that is not a reader's private suffix.
SeqId shared_sequence(const Engine& e) {
  for (SeqId seq : e.cache().manager().sequences()) {
    if (e.cache().manager().sequence(seq).first_position == 0) return seq;
  }
  return SeqId();
}

TEST_F(EngineEviction, LongSharedSessionKeepsTheRuleAndReturnsMemory) {
  const std::vector<AdapterPtr> readers = {lorakv::testing::make_tiny_adapter(model(), "planner", 1, 11),
                                           lorakv::testing::make_tiny_adapter(model(), "actor", 1, 22),
                                           lorakv::testing::make_tiny_adapter(model(), "critic", 1, 33)};
  Engine engine(model(), pools(512));
  const ContextId ctx =
      engine.create_context({SharingMode::kBaseLrShared, SharedWriter::kFirst, streaming()}, readers);
  std::mt19937 rng(11);
  int64_t tokens = 0, max_bytes = 0, evicting_steps = 0, commits = 0, metadata_at_500 = 0;
  const int64_t chunk_cap = 16;
  for (int step = 0; step < 2000; ++step) {
    // Text arrives now and then (a tool's output, another turn); readers catch up in chunks
    // and reply a token at a time; a reply of three tokens is committed.
    if (step == 0 || rng() % 4 == 0) {
      const std::vector<int32_t> text = random_tokens(1 + static_cast<int64_t>(rng() % 24), static_cast<uint32_t>(step));
      engine.append(ctx, text);
      tokens += static_cast<int64_t>(text.size());
    }
    std::vector<StepWork> work;
    for (int32_t i = 0; i < 3; ++i) {
      const ReaderRef r{ctx, i};
      StepWork w;
      w.reader = r;
      if (engine.private_tokens(r).size() >= 3) {
        commits += 1;
        tokens += engine.commit_private(r);
        continue;
      }
      if (engine.private_tokens(r).empty() && engine.pending_tokens(r) > 0) {
        w.max_tokens = chunk_cap;
      } else {
        w.kind = StepWork::Kind::kPrivate;
        w.tokens = {static_cast<int32_t>(rng() % 48)};
      }
      work.push_back(w);
    }
    if (work.empty()) continue;
    const StepResult r = lorakv::testing::step_then_evict(engine, work);
    ASSERT_TRUE(r.ok) << "step " << step << ": " << r.admissions.at(0).reason;
    evicting_steps += r.stats.rows_evicted > 0;
    // The context's shared rows show exactly the rule's positions, in every lane.
    const SeqId shared = shared_sequence(engine);
    ASSERT_TRUE(shared.valid());
    const int64_t processed = engine.cache().manager().sequence(shared).num_positions;
    const std::vector<std::vector<int32_t>> kept = engine.kept_positions(ctx);
    ASSERT_EQ(static_cast<int64_t>(kept.size()), engine.cache().layout().num_lanes());
    for (int64_t lane = 0; lane < engine.cache().layout().num_lanes(); ++lane) {
      ASSERT_EQ(kept[static_cast<size_t>(lane)], streaming_keeps(processed)) << "step " << step << " lane " << lane;
    }
    max_bytes = std::max(max_bytes, engine.memory().cache.bytes_in_use);
    if (step == 500) metadata_at_500 = engine.memory().cache.metadata_bytes;
  }
  EXPECT_GT(tokens, 40 * kBudget) << "the session ran far past its budget";
  // The cache's host bookkeeping does not grow with the evicted history (it grew 36 bytes a
  // token, about 250 KiB over this session, with a token id and a writer per position): the
  // slack is the readers' private rows, which come and go (a few KiB at most).
  EXPECT_LE(engine.memory().cache.metadata_bytes, metadata_at_500 + 8 * 1024);
  // The trajectory itself stays whole (Session::tokens, saves and late readers use it).
  EXPECT_GE(engine.memory().trajectory_bytes, 4 * tokens);
  EXPECT_GE(evicting_steps, 200);
  EXPECT_GE(commits, 100);
  // Per lane: the shared rows in at most blocks_for(budget + one chunk) blocks, plus two
  // that masked rows may pin (the sinks' block, the block the window slides out of), each
  // with the group's residual block beside it; and one block of private rows per reader.
  const cache::CacheLayout& l = engine.cache().layout();
  int64_t residual_block_bytes = 0;
  for (const cache::PoolUsage& p : engine.memory().cache.pools) {
    if (p.rank > 0) residual_block_bytes += p.block_bytes;
  }
  const int64_t base_block_bytes = engine.cache().pool(0).block_bytes();
  const int64_t shared_blocks = l.blocks_for(kBudget + chunk_cap) + 2;
  const int64_t bound = l.num_lanes() * (shared_blocks * (base_block_bytes + residual_block_bytes) + 3 * base_block_bytes);
  EXPECT_LE(max_bytes, bound);
  EXPECT_LE(engine.memory().cache.peak_bytes_in_use, bound);
  // Without eviction the same session would hold every token's rows.
  EXPECT_GT(l.blocks_for(tokens) * l.num_lanes() * base_block_bytes, 2 * bound);
}

TEST_F(EngineEviction, BadEvictionOptionsAreRefusedBeforeAnythingExists) {
  Engine engine(model(), pools());
  cache::eviction::EvictionConfig bad = streaming();
  bad.policy = "snapkv2";
  EXPECT_THROW(engine.create_context({SharingMode::kFull, SharedWriter::kFirst, bad}, {nullptr}), ConfigError);
  bad = streaming();
  bad.budget_tokens = 0;
  EXPECT_THROW(engine.create_context({SharingMode::kFull, SharedWriter::kFirst, bad}, {nullptr}), ConfigError);
  EXPECT_EQ(engine.memory().cache.bytes_in_use, 0);
  // (A context with a policy saves its lanes: tests/runtime/engine_save_eviction_test.cpp.)
}

}  // namespace
}  // namespace lorakv::runtime

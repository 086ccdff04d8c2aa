// tests/runtime/engine_admission_test.cpp: admission per work entry, on the tiny model
// (tests/runtime/tiny_engine_model.h): a deferred entry changes nothing and is reported with
// its pool and numbers; it does not block later entries, and a later entry on its context is
// planned against the rows that exist; readers mid-reply go on while others commit; dropped
// private rows go.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "tests/runtime/tiny_engine_model.h"
#include "tests/support/reference_values.h"

namespace lorakv::runtime {
namespace {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;

std::vector<int32_t> seq_tokens(int32_t n, int32_t start = 1) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back((start + i * 7) % 48);
  return t;
}

class EngineAdmission : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = lorakv::testing::make_tiny_engine_model();
    a_ = lorakv::testing::make_tiny_adapter(*tiny_.model, "a", 1, 11);
    b_ = lorakv::testing::make_tiny_adapter(*tiny_.model, "b", 2, 22);
  }
  EngineOptions small_pools() const {
    EngineOptions eo;
    eo.base_rows = 64;  // 4 blocks of 16 per lane
    eo.residual_rows = 64;
    return eo;
  }
  const LlamaModel& model() const { return *tiny_.model; }
  static StepWork context_work(ContextId c, int32_t reader, int64_t max_tokens) {
    StepWork w;
    w.reader = {c, reader};
    w.max_tokens = max_tokens;
    return w;
  }
  static StepWork private_work(ContextId c, int32_t reader, std::vector<int32_t> tokens) {
    return StepWork::private_tokens({c, reader}, std::move(tokens));
  }

  lorakv::testing::TinyEngineModel tiny_;
  AdapterPtr a_, b_;
};

// The first entry needs more blocks than the pool has: it is deferred with nothing created,
// pinned or indexed, and reported with the pool and the numbers; the second, on another
// context, runs and equals the same work run alone.
TEST_F(EngineAdmission, DeferredEntryChangesNothingAndLaterEntriesRun) {
  Engine engine(model(), small_pools());
  // A first context processed once, so its full blocks are in the index for others to adopt.
  const ContextId warm = engine.create_context({SharingMode::kBaseShared, SharedWriter::kFirst}, {a_});
  engine.append(warm, seq_tokens(32));
  prefill(engine, {warm, 0});
  const ContextId big = engine.create_context({SharingMode::kBaseShared, SharedWriter::kFirst}, {a_});
  engine.append(big, seq_tokens(32));  // the same 32 tokens: two blocks to adopt ...
  engine.append(big, seq_tokens(60, 5));  // ... then more than the pool has left
  const ContextId small = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {b_});
  engine.append(small, seq_tokens(5, 3));
  const cache::CacheStats before = engine.cache().stats();
  const size_t sequences_before = engine.cache().manager().sequences().size();

  const StepResult r = engine.step({context_work(big, 0, 64), context_work(small, 0, 64)});
  ASSERT_EQ(r.admissions.size(), 2u);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.admissions[0].admitted);
  EXPECT_NE(r.admissions[0].reason.find("base pool"), std::string::npos) << r.admissions[0].reason;
  EXPECT_GT(r.admissions[0].shortfall.blocks_needed.at(0), r.admissions[0].shortfall.blocks_free.at(0));
  EXPECT_EQ(r.outputs[0].logits.size(0), 0);
  EXPECT_EQ(engine.pending_tokens({big, 0}), 92) << "the deferred entry processed nothing";
  EXPECT_TRUE(r.admissions[1].admitted);
  EXPECT_EQ(r.outputs[1].tokens_processed, 5);
  // Only the small context's rows were added: its own sequence, one block per lane.
  EXPECT_EQ(engine.cache().manager().sequences().size(), sequences_before + 1)
      << "the deferred entry created or kept a sequence (its adopted prefix blocks stay pinned)";
  const int64_t lanes = model().config().num_layers;
  EXPECT_EQ(engine.cache().stats().pools[0].blocks_used, before.pools[0].blocks_used + lanes);
  EXPECT_EQ(r.stats.admitted, 1);
  EXPECT_EQ(r.stats.deferred, 1);
  EXPECT_EQ(r.stats.blocks_reserved.at(0), lanes);
  EXPECT_EQ(r.stats.tokens_processed, 5);
  EXPECT_EQ(r.stats.prefix_hit_tokens, 0) << "the deferred entry's adopted blocks do not count";

  Engine alone(model(), small_pools());
  const ContextId s2 = alone.create_context({SharingMode::kFull, SharedWriter::kFirst}, {b_});
  alone.append(s2, seq_tokens(5, 3));
  const StepResult ra = alone.step({context_work(s2, 0, 64)});
  EXPECT_LT(lorakv::testing::relative_error(r.outputs[1].logits, ra.outputs[0].logits),
            lorakv::testing::kFloat32LogitsTolerance);
}

// A new context whose first blocks the index holds reports them as prefix hits, in tokens.
TEST_F(EngineAdmission, StatsCountPrefixHitsInTokens) {
  Engine engine(model());
  const ContextId first = engine.create_context({SharingMode::kBaseShared, SharedWriter::kFirst}, {a_});
  engine.append(first, seq_tokens(40));
  prefill(engine, {first, 0});
  const ContextId second = engine.create_context({SharingMode::kBaseShared, SharedWriter::kFirst}, {a_});
  engine.append(second, seq_tokens(40));
  const StepResult r = engine.step({context_work(second, 0, 64)});
  EXPECT_EQ(r.stats.prefix_hit_tokens, 32);  // two whole blocks of 16; the partial one is new
  EXPECT_EQ(r.stats.tokens_processed, 8);
  EXPECT_GE(r.stats.run_seconds, 0.0);
}

// Two readers of one context, writer `first`: the first entry asks for more rows than fit and
// is deferred; the second asks for a chunk that fits and, planned against the rows that exist
// (none), writes the shared base rows itself: the same rows and logits as when it runs alone.
TEST_F(EngineAdmission, LaterEntryOnTheSameContextIsPlannedWithoutTheDeferredOne) {
  for (SharingMode mode : {SharingMode::kFullShared, SharingMode::kBaseShared}) {
    Engine engine(model(), small_pools());
    const ContextId c = engine.create_context({mode, SharedWriter::kFirst}, {a_, b_});
    engine.append(c, seq_tokens(90));
    const StepResult r = engine.step({context_work(c, 0, 90), context_work(c, 1, 20)});
    ASSERT_FALSE(r.admissions[0].admitted) << sharing_mode_name(mode);
    ASSERT_TRUE(r.admissions[1].admitted) << sharing_mode_name(mode);
    EXPECT_EQ(r.outputs[1].tokens_processed, 20);
    EXPECT_EQ(engine.pending_tokens({c, 1}), 70);
    EXPECT_EQ(engine.pending_tokens({c, 0}), mode == SharingMode::kFullShared ? 70 : 90)
        << "reader 0 can read the shared rows reader 1 wrote; in base_shared it still needs its residuals";

    Engine alone(model(), small_pools());
    const ContextId c2 = alone.create_context({mode, SharedWriter::kFirst}, {a_, b_});
    alone.append(c2, seq_tokens(90));
    const StepResult ra = alone.step({context_work(c2, 1, 20)});
    EXPECT_LT(lorakv::testing::relative_error(r.outputs[1].logits, ra.outputs[0].logits),
              lorakv::testing::kFloat32LogitsTolerance)
        << sharing_mode_name(mode);
    EXPECT_EQ(engine.cache().stats().bytes_in_use, alone.cache().stats().bytes_in_use) << sharing_mode_name(mode);
  }
}

// A pool too small for a context's first chunk: prefill throws CapacityError naming the pool,
// and the refused work left nothing behind (no sequence, no block, no index entry).
TEST_F(EngineAdmission, FullPoolLeavesNoTrace) {
  Engine engine(model(), small_pools());
  const ContextId warm = engine.create_context({SharingMode::kBaseShared, SharedWriter::kFirst}, {a_});
  engine.append(warm, seq_tokens(32));
  prefill(engine, {warm, 0});
  const cache::CacheStats before = engine.cache().stats();
  const int64_t entries = engine.cache().manager().index().num_entries();
  const size_t sequences = engine.cache().manager().sequences().size();
  const ContextId c = engine.create_context({SharingMode::kBaseShared, SharedWriter::kFirst}, {a_, b_});
  engine.append(c, seq_tokens(32));  // adoptable blocks first
  engine.append(c, seq_tokens(100, 9));
  try {
    prefill(engine, {c, 0});
    FAIL() << "no CapacityError";
  } catch (const CapacityError& e) {
    EXPECT_NE(std::string(e.what()).find("base pool"), std::string::npos) << e.what();
  }
  EXPECT_EQ(engine.cache().manager().sequences().size(), sequences);
  EXPECT_EQ(engine.cache().stats().pools[0].blocks_used, before.pools[0].blocks_used);
  EXPECT_EQ(engine.cache().stats().pools[1].blocks_used, before.pools[1].blocks_used);
  EXPECT_EQ(engine.cache().manager().index().num_entries(), entries);
  EXPECT_EQ(engine.pending_tokens({c, 0}), 132);
  // The refusal left the engine usable: a smaller context on it runs.
  engine.release_context(c);
  const ContextId ok = engine.create_context({SharingMode::kBaseShared, SharedWriter::kFirst}, {a_});
  engine.append(ok, seq_tokens(20));
  EXPECT_TRUE(prefill(engine, {ok, 0}).defined());
}

// Round robin: reader 0 starts a reply, reader 1 commits its own reply to the context, and
// reader 0 goes on replying (it reads only rows below its private start), with the logits of
// a run where reader 1 committed only afterwards.
TEST_F(EngineAdmission, ReaderMidReplyContinuesAfterAnotherCommits) {
  for (SharingMode mode : {SharingMode::kFull, SharingMode::kBaseShared}) {
    auto run = [&](bool commit_first) {
      Engine engine(model());
      const ContextId c = engine.create_context({mode, SharedWriter::kFirst}, {a_, b_});
      engine.append(c, seq_tokens(24));
      prefill(engine, {c, 0});
      prefill(engine, {c, 1});
      engine.step({private_work(c, 0, {5, 6})});
      engine.step({private_work(c, 1, {7})});
      if (commit_first) engine.commit_private({c, 1});
      EXPECT_GT(engine.pending_tokens({c, 0}), commit_first ? 0 : -1);
      const StepResult r = engine.step({private_work(c, 0, {8, 9})});
      EXPECT_TRUE(r.ok);
      return r.outputs.at(0).logits;
    };
    const at::Tensor after_commit = run(true), without = run(false);
    EXPECT_LT(lorakv::testing::relative_error(after_commit, without), lorakv::testing::kFloat32LogitsTolerance)
        << sharing_mode_name(mode);
  }
  // A reader that has not started a reply still must process the context first.
  Engine engine(model());
  const ContextId c = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {a_});
  engine.append(c, seq_tokens(8));
  EXPECT_THROW(engine.step({private_work(c, 0, {1})}), ConfigError);
}

// Pool sizes come from users: a row count whose pool bytes overflow int64 is a ConfigError
// naming the option, not a wrapped size (the rows + block_size - 1 rounding overflowed too).
TEST_F(EngineAdmission, PoolSizesThatOverflowAreRefused) {
  for (int64_t rows : {std::numeric_limits<int64_t>::max(), int64_t{1} << 60}) {
    EngineOptions base = small_pools();
    base.base_rows = rows;
    try {
      Engine engine(model(), base);
      FAIL() << "no error for base_rows " << rows;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("base_rows = " + std::to_string(rows)), std::string::npos) << e.what();
    }
    EngineOptions residual = small_pools();
    residual.residual_rows = rows;
    try {
      Engine engine(model(), residual);
      FAIL() << "no error for residual_rows " << rows;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("residual_rows"), std::string::npos) << e.what();
    }
  }
}

// drop_private frees the private rows and forgets the tokens; the next reply starts at the
// context's end again.
TEST_F(EngineAdmission, DropPrivateFreesItsRows) {
  Engine engine(model());
  const ContextId c = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {a_});
  engine.append(c, seq_tokens(20));
  prefill(engine, {c, 0});
  const int64_t context_bytes = engine.cache().stats().bytes_in_use;
  const StepResult first = engine.step({private_work(c, 0, seq_tokens(18, 2))});
  EXPECT_GT(engine.cache().stats().bytes_in_use, context_bytes);
  engine.drop_private({c, 0});
  EXPECT_EQ(engine.cache().stats().bytes_in_use, context_bytes);
  EXPECT_TRUE(engine.private_tokens({c, 0}).empty());
  const StepResult again = engine.step({private_work(c, 0, seq_tokens(18, 2))});
  EXPECT_EQ(again.outputs[0].first_position, 20);
  EXPECT_LT(lorakv::testing::relative_error(again.outputs[0].logits, first.outputs[0].logits),
            lorakv::testing::kFloat32LogitsTolerance);
}

}  // namespace
}  // namespace lorakv::runtime

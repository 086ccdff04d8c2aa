// tests/runtime/engine_reuse_test.cpp: what the engine reuses instead of computing again, on
// the tiny model (tests/runtime/tiny_engine_model.h): a released context's system prompt is
// adopted by the next context (cached blocks), identical prompts scheduled in one step share
// rows (the first writes, the others wait a step and adopt them), and a commit adopts the
// committer's private rows where they equal the context's rows. Each reuse must give the
// logits of an engine that computed everything (float32 on the same kernels: the rows are
// the same numbers, only their order in a batch differs, so kFloat32LogitsTolerance).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/generator.h"
#include "tests/runtime/tiny_engine_model.h"
#include "tests/support/reference_values.h"

namespace lorakv::runtime {
namespace {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;
using lorakv::testing::kFloat32LogitsTolerance;
using lorakv::testing::relative_error;

std::vector<int32_t> seq_tokens(int32_t n, int32_t start = 1) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back((start + i * 7) % 48);
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class EngineReuse : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = lorakv::testing::make_tiny_engine_model();
    a_ = lorakv::testing::make_tiny_adapter(*tiny_.model, "a", 1, 11);
    b_ = lorakv::testing::make_tiny_adapter(*tiny_.model, "b", 2, 22);
  }
  const LlamaModel& model() const { return *tiny_.model; }
  EngineOptions pools(int64_t rows = 512) const {
    EngineOptions eo;
    eo.base_rows = rows;
    eo.residual_rows = rows;
    return eo;
  }
  // The reader's logits for `probe` run as private tokens after its context: what any
  // reader of any mode can be asked (a reader of rows others wrote has no context logits).
  static at::Tensor probe_logits(Engine& e, ReaderRef reader, const std::vector<int32_t>& probe) {
    prefill(e, reader);
    StepWork w;
    w.reader = reader;
    w.kind = StepWork::Kind::kPrivate;
    w.tokens = probe;
    return e.step({w}).outputs.at(0).logits;
  }
  // `authored`: tokens [authored.first, authored.second) are reader 0's turn (writer author).
  at::Tensor fresh_probe_logits(ContextOptions mode, const std::vector<AdapterPtr>& readers, int32_t reader,
                                const std::vector<int32_t>& tokens, const std::vector<int32_t>& probe,
                                std::pair<size_t, size_t> authored = {0, 0}) const {
    Engine e(model(), pools());
    const ContextId c = e.create_context(mode, readers);
    const auto part = [&](size_t from, size_t to) { return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to); };
    e.append(c, part(0, authored.first));
    e.append(c, part(authored.first, authored.second), 0);
    e.append(c, part(authored.second, tokens.size()));
    prefill(e, {c, 0});  // reader 0 writes first, as in the tests' engines
    return probe_logits(e, {c, reader}, probe);
  }
  // The reader's logits at the end of `tokens`, on an engine that never saw anything else.
  at::Tensor fresh_logits(ContextOptions mode, const std::vector<AdapterPtr>& readers, int32_t reader,
                          const std::vector<int32_t>& tokens) const {
    Engine e(model(), pools());
    const ContextId c = e.create_context(mode, readers);
    e.append(c, tokens);
    return prefill(e, {c, reader});
  }

  lorakv::testing::TinyEngineModel tiny_;
  AdapterPtr a_, b_;
};

// A context with a known 64-token system prompt is released; the next context with the same
// prompt and first reader adopts its four blocks from the cache (prefix-hit tokens in the
// step's stats) and gets the logits of a fresh engine. Fails when released blocks leave the
// index at once. A context whose first reader is another adapter adopts nothing: with writer
// `first` its rows are that reader's own (in `full` they always were).
TEST_F(EngineReuse, ReleasedSystemPromptIsAdoptedByTheNextContext) {
  const std::vector<int32_t> system = seq_tokens(64, 3);
  for (SharingMode mode : {SharingMode::kFull, SharingMode::kFullShared, SharingMode::kBaseShared,
                           SharingMode::kBaseLrShared}) {
    SCOPED_TRACE(sharing_mode_name(mode));
    Engine engine(model(), pools());
    const ContextId first = engine.create_context({mode, SharedWriter::kFirst}, {a_});
    engine.append(first, concat(system, seq_tokens(9, 5)));
    prefill(engine, {first, 0});
    engine.release_context(first);
    const EngineMemory released = engine.memory();
    EXPECT_EQ(released.cache.bytes_in_use, 0);
    EXPECT_GT(released.cache.cached_bytes, 0) << "the released rows stay findable";
    EXPECT_EQ(released.cache.bytes_in_use + released.cache.cached_bytes + released.cache.free_bytes,
              released.cache.reserved_bytes);

    const std::vector<int32_t> second_tokens = concat(system, seq_tokens(5, 30));
    const ContextId second = engine.create_context({mode, SharedWriter::kFirst}, {a_});
    engine.append(second, second_tokens);
    int64_t hits = 0;
    const at::Tensor logits =
        prefill(engine, {second, 0}, [&](Engine&, const StepResult& r) { hits += r.stats.prefix_hit_tokens; });
    EXPECT_EQ(hits, 64);
    ASSERT_TRUE(logits.defined());
    EXPECT_LT(relative_error(logits, fresh_logits({mode, SharedWriter::kFirst}, {a_}, 0, second_tokens)),
              kFloat32LogitsTolerance);

    const ContextId other_reader = engine.create_context({mode, SharedWriter::kFirst}, {b_});
    engine.append(other_reader, second_tokens);
    hits = 0;
    prefill(engine, {other_reader, 0}, [&](Engine&, const StepResult& r) { hits += r.stats.prefix_hit_tokens; });
    EXPECT_EQ(hits, 0) << "rows a_ wrote, where b_ writes first";
  }
}

// Reuse is decided by provenance: whatever other contexts left in the index, a context's
// logits are a fresh engine's. The engine first runs every writer-`base` mode on the prompt
// (base rows and the shared C by the base model, each reader's own C; released, so their
// blocks stay cached), then each mode and writer on the same prompt with three readers, each
// of which processes the context and answers a probe. Writers `base` and `author` (the
// prompt is text, the base model's) reuse the rows; writer `first` and `full` reuse nothing the base model wrote (a reader of writer `first` writes
// the rows itself). The readers share their A (so base_lr_shared serves them) and differ in B.
TEST_F(EngineReuse, EveryModeAfterBaseWriterContextsGivesAFreshEnginesLogits) {
  const std::vector<int32_t> prompt = seq_tokens(45, 6), probe = {4, 11};
  const std::vector<AdapterPtr> readers = {a_, lorakv::testing::make_tiny_adapter(model(), "a2", 1, 33),
                                           lorakv::testing::make_tiny_adapter(model(), "a3", 1, 44)};
  const SharingMode shared_modes[] = {SharingMode::kFullShared, SharingMode::kBaseShared, SharingMode::kBaseLrShared};
  std::vector<ContextOptions> cases = {{SharingMode::kFull, SharedWriter::kFirst}};
  for (SharingMode mode : shared_modes) {
    for (SharedWriter writer : {SharedWriter::kFirst, SharedWriter::kBase, SharedWriter::kAuthor}) cases.push_back({mode, writer});
  }
  for (const ContextOptions& k : cases) {
    SCOPED_TRACE(std::string(sharing_mode_name(k.mode)) + " writer " + shared_writer_name(k.writer));
    Engine engine(model(), pools());
    for (SharingMode mode : shared_modes) {
      const ContextId warm = engine.create_context({mode, SharedWriter::kBase}, readers);
      engine.append(warm, prompt);
      for (int32_t r = 0; r < 3; ++r) prefill(engine, {warm, r});
      engine.release_context(warm);
    }
    const ContextId c = engine.create_context(k, readers);
    engine.append(c, prompt);
    int64_t hits = 0;
    prefill(engine, {c, 0}, [&](Engine&, const StepResult& r) { hits += r.stats.prefix_hit_tokens; });
    // Writer author: the prompt is text no agent wrote, the base model's to write.
    const bool reused = k.mode != SharingMode::kFull && k.writer != SharedWriter::kFirst;
    EXPECT_EQ(hits, reused ? 32 : 0) << "whole blocks of 16 below the last token";
    for (int32_t r = 0; r < 3; ++r) {
      EXPECT_LT(relative_error(probe_logits(engine, {c, r}, probe), fresh_probe_logits(k, readers, r, prompt, probe)),
                kFloat32LogitsTolerance)
          << "reader " << r;
    }
  }
}

// Cached blocks are taken back for other rows when the pool needs them, the chain's tail
// first: a later context then adopts what is left of the prefix, and what it adopts is right.
TEST_F(EngineReuse, CachedRowsAreReclaimedTailFirstWhenThePoolNeedsThem) {
  Engine engine(model(), pools(160));  // 10 blocks of 16 per lane, 2 lanes
  const std::vector<int32_t> system = seq_tokens(96, 3);  // 6 blocks
  const ContextOptions full{SharingMode::kFull, SharedWriter::kFirst};
  const ContextId first = engine.create_context(full, {nullptr});
  engine.append(first, concat(system, {1}));
  prefill(engine, {first, 0});
  engine.release_context(first);  // 6 blocks per lane cached, the partial one free
  // Another context needs 6 blocks per lane: the 8 free blocks, then 4 cached ones, the
  // system prompt's last two blocks in both lanes.
  const ContextId other = engine.create_context(full, {nullptr});
  engine.append(other, seq_tokens(96, 40));
  prefill(engine, {other, 0});
  engine.release_context(other);
  const ContextId again = engine.create_context(full, {nullptr});
  const std::vector<int32_t> again_tokens = concat(system, {2});
  engine.append(again, again_tokens);
  int64_t hits = 0;
  const at::Tensor logits =
      prefill(engine, {again, 0}, [&](Engine&, const StepResult& r) { hits += r.stats.prefix_hit_tokens; });
  EXPECT_EQ(hits, 64);  // blocks 0..3 of the system prompt survived
  EXPECT_LT(relative_error(logits, fresh_logits(full, {nullptr}, 0, again_tokens)), kFloat32LogitsTolerance);
}

// Four contexts with one prompt in one step: the first writes the rows, the others wait (not
// a capacity shortfall) and adopt them in the next step. Without the wait all four would
// compute the prompt; with reuse but without the last-token rule they would have no logits.
TEST_F(EngineReuse, IdenticalPromptsInOneStepShareTheFirstOnesRows) {
  const std::vector<int32_t> prompt = seq_tokens(50, 9);
  Engine engine(model(), pools());
  std::vector<ContextId> contexts;
  std::vector<StepWork> work;
  for (int i = 0; i < 4; ++i) {
    contexts.push_back(engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {a_}));
    engine.append(contexts.back(), prompt);
    StepWork w;
    w.reader = {contexts.back(), 0};
    work.push_back(w);
  }
  const StepResult first = engine.step(work);
  EXPECT_FALSE(first.ok);
  EXPECT_TRUE(first.admissions[0].admitted);
  EXPECT_TRUE(first.capacity.ok) << "waiting is not a shortfall";
  for (int i = 1; i < 4; ++i) {
    EXPECT_FALSE(first.admissions[i].admitted);
    EXPECT_EQ(first.admissions[i].waits_for, 0);
    EXPECT_NE(first.admissions[i].reason.find("waits for the rows work entry 0"), std::string::npos);
  }
  const at::Tensor reference = first.outputs[0].logits[0];
  work.erase(work.begin());
  const StepResult second = engine.step(work);
  ASSERT_TRUE(second.ok);
  EXPECT_EQ(second.stats.prefix_hit_tokens, 3 * 48);  // whole blocks below the last token
  EXPECT_EQ(second.stats.tokens_processed, 3 * 2);
  for (const StepOutput& out : second.outputs) {
    ASSERT_EQ(out.logits.size(0), 1);
    EXPECT_LT(relative_error(out.logits[0], reference), kFloat32LogitsTolerance);
  }
  // Per lane (2), three blocks are shared four ways: 3 + 4 partial blocks, not 4 x 4.
  EXPECT_EQ(engine.cache().stats().pools[0].blocks_used, 2 * (3 + 4));
}

// The same through generate(): N identical prompts give N identical greedy replies, the
// prompt computed once (the driver's stats count the adopted tokens).
TEST_F(EngineReuse, GenerateComputesIdenticalPromptsOnce) {
  std::vector<GenerationRequest> requests(4);
  for (GenerationRequest& r : requests) {
    r.prompt = seq_tokens(40, 2);
    r.max_tokens = 5;
  }
  DriverStats stats;
  GeneratorOptions options;
  options.stats = &stats;
  const std::vector<GenerationOutput> out = generate(model(), nullptr, requests, nullptr, options);
  EXPECT_EQ(stats.prefix_hit_tokens, 3 * 32);
  const std::vector<GenerationOutput> alone = generate(model(), nullptr, {requests[0]});
  for (const GenerationOutput& o : out) EXPECT_EQ(o.tokens, alone[0].tokens);
}

// A reply committed in `full` (the reader's own rows), in `full_shared` with writer `first`
// or `author`, and in base_shared and base_lr_shared with writer `author` (the rows it kept
// in the shared layout) is adopted: the committer has nothing to process after the commit,
// and the next turn's logits equal an engine that processed the reply as context. Where the
// rows differ (base_shared and base_lr_shared with writer first, writer base) or the context
// grew since the reply began, the reply is processed again. (Writer author's fallbacks:
// engine_author_rows_test.cpp.)
TEST_F(EngineReuse, CommitAdoptsPrivateRowsWhereTheyEqualTheContextRows) {
  const std::vector<int32_t> context = seq_tokens(21, 4), reply = seq_tokens(19, 17), next = seq_tokens(3, 8);
  struct Case {
    SharingMode mode;
    SharedWriter writer;
    bool adopted;
  };
  const Case cases[] = {{SharingMode::kFull, SharedWriter::kFirst, true},
                        {SharingMode::kFullShared, SharedWriter::kFirst, true},
                        {SharingMode::kFullShared, SharedWriter::kBase, false},
                        {SharingMode::kFullShared, SharedWriter::kAuthor, true},
                        {SharingMode::kBaseShared, SharedWriter::kFirst, false},
                        {SharingMode::kBaseShared, SharedWriter::kAuthor, true},
                        {SharingMode::kBaseLrShared, SharedWriter::kFirst, false},
                        {SharingMode::kBaseLrShared, SharedWriter::kAuthor, true}};
  // Reader 0 processes `context` and runs `reply` as private tokens.
  auto reply_on = [&](Engine& engine, ContextOptions mode, const std::vector<AdapterPtr>& readers) {
    const ContextId c = engine.create_context(mode, readers);
    engine.append(c, context);
    prefill(engine, {c, 0});
    StepWork w;
    w.reader = {c, 0};
    w.kind = StepWork::Kind::kPrivate;
    w.tokens = reply;
    EXPECT_TRUE(engine.step({w}).ok);
    return c;
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string(sharing_mode_name(k.mode)) + " writer " + shared_writer_name(k.writer));
    const std::vector<AdapterPtr> readers = {a_, k.mode == SharingMode::kBaseLrShared ? a_ : b_};
    Engine engine(model(), pools());
    const ContextId c = reply_on(engine, {k.mode, k.writer}, readers);
    EXPECT_EQ(engine.commit_private({c, 0}), static_cast<int64_t>(reply.size()));
    EXPECT_EQ(engine.adopted_commits(), k.adopted ? 1 : 0);
    EXPECT_EQ(engine.pending_tokens({c, 0}) == 0, k.adopted);
    EXPECT_EQ(engine.private_tokens({c, 0}).size(), 0u);
    engine.append(c, next);
    const std::vector<int32_t> all = concat(concat(context, reply), next), probe = {5, 6};
    const std::pair<size_t, size_t> authored{context.size(), context.size() + reply.size()};  // reader 0's reply
    EXPECT_LT(relative_error(probe_logits(engine, {c, 0}, probe),
                             fresh_probe_logits({k.mode, k.writer}, readers, 0, all, probe, authored)),
              kFloat32LogitsTolerance);
    // The other reader reads (full_shared) or builds (full) rows after the adopted ones.
    EXPECT_LT(relative_error(probe_logits(engine, {c, 1}, probe),
                             fresh_probe_logits({k.mode, k.writer}, readers, 1, all, probe, authored)),
              kFloat32LogitsTolerance);
  }
  // The context grew while the reply ran: the rows are not a continuation, processed again.
  Engine engine(model(), pools());
  const ContextId c = reply_on(engine, {SharingMode::kFull, SharedWriter::kFirst}, {a_});
  engine.append(c, next);
  engine.commit_private({c, 0});
  EXPECT_EQ(engine.adopted_commits(), 0);
  EXPECT_EQ(engine.pending_tokens({c, 0}), static_cast<int64_t>(next.size() + reply.size()));
}

// base_shared and base_lr_shared key their base rows alike, so a base_lr_shared context with
// writer `base` adopts base rows a base_shared context indexed, and its shared C (which that
// context never wrote) starts behind them: the base writer must run from the C's coverage.
// Found by the sessions' concurrency test (a session of each mode on one question).
// Writer author plans the same catch-up, each position's C by its own writer: the prompt's
// second half is reader 0's turn, so the base model fills the C of the first half and reader 0
// that of the second.
TEST_F(EngineReuse, SharedCLaggingAdoptedBaseRowsIsFilledByTheBaseWriter) {
  const std::vector<int32_t> prompt = seq_tokens(40);
  const std::vector<int32_t> probe = {3, 9};
  const AdapterPtr a2 = lorakv::testing::make_tiny_adapter(model(), "a2", 1, 33);  // a's A: one group
  for (SharedWriter writer : {SharedWriter::kBase, SharedWriter::kAuthor}) {
    SCOPED_TRACE(shared_writer_name(writer));
    const ContextOptions lr{SharingMode::kBaseLrShared, writer};
    const std::pair<size_t, size_t> authored = writer == SharedWriter::kAuthor ? std::pair<size_t, size_t>{20, 40}
                                                                               : std::pair<size_t, size_t>{0, 0};
    const auto append_prompt = [&](Engine& engine, ContextId ctx) {
      engine.append(ctx, std::vector<int32_t>(prompt.begin(), prompt.begin() + 20));
      engine.append(ctx, std::vector<int32_t>(prompt.begin() + 20, prompt.end()),
                    authored.second > 0 ? std::optional<int32_t>(0) : std::nullopt);
    };
    Engine e(model(), pools());
    const ContextId other = e.create_context({SharingMode::kBaseShared, writer}, {a_});
    append_prompt(e, other);
    prefill(e, {other, 0});
    const ContextId c = e.create_context(lr, {a_, a2});
    append_prompt(e, c);
    int64_t hits = 0;
    prefill(e, {c, 1}, [&](Engine&, const StepResult& r) { hits += r.stats.prefix_hit_tokens; });
    EXPECT_EQ(hits, 32) << "the base rows are adopted, the shared C is not";
    const at::Tensor reused = probe_logits(e, {c, 1}, probe);
    const at::Tensor fresh = fresh_probe_logits(lr, {a_, a2}, 1, prompt, probe, authored);
    EXPECT_LT(relative_error(reused, fresh), kFloat32LogitsTolerance);
  }
}

}  // namespace
}  // namespace lorakv::runtime

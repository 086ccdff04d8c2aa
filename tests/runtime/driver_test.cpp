// tests/runtime/driver_test.cpp: the one loop over Engine::step (runtime/driver.h), on the
// tiny model (tests/runtime/tiny_engine_model.h): the step hook sees every step, before the
// jobs see its outputs, and may change the engine; deferred work is asked for again; a step
// that can admit nothing is a CapacityError; a job with nothing to start generating from is
// a ConfigError; and a generating job equals the same work stepped by hand.
#include "lorakv/runtime/driver.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/engine.h"
#include "tests/runtime/tiny_engine_model.h"
#include "tests/support/reference_values.h"

namespace lorakv::runtime {
namespace {

std::vector<int32_t> seq_tokens(int32_t n, int32_t start = 1) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back((start + i * 7) % 48);
  return t;
}

int32_t greedy_token(const at::Tensor& logits) { return static_cast<int32_t>(logits.argmax().item<int64_t>()); }

class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override { tiny_ = lorakv::testing::make_tiny_engine_model(); }
  const LlamaModel& model() const { return *tiny_.model; }
  EngineOptions pools(int64_t rows) const {
    EngineOptions eo;
    eo.base_rows = rows;
    eo.residual_rows = rows;
    eo.prefill_chunk = 16;
    return eo;
  }
  // A job that generates `n` greedy tokens and records them.
  static DriverJob greedy_job(ReaderRef reader, int n, std::vector<int32_t>& out) {
    DriverJob job;
    job.reader = reader;
    job.next = [&out, n](const at::Tensor& logits) -> std::optional<int32_t> {
      out.push_back(greedy_token(logits));
      if (static_cast<int>(out.size()) > n) return std::nullopt;
      return out.back();
    };
    return job;
  }

  lorakv::testing::TinyEngineModel tiny_;
};

// The hook runs once per step with that step's result, before any job sees the step's
// logits, and what it does to the engine (here: appending to another context) sticks.
TEST_F(DriverTest, HookSeesEveryStepBeforeTheJobsAndMayChangeTheEngine) {
  Engine engine(model(), pools(512));
  const ContextId c = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  const ContextId side = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  engine.append(c, seq_tokens(40));  // 3 chunks of 16
  std::vector<std::string> events;
  std::vector<int32_t> tokens;
  std::vector<DriverJob> jobs{greedy_job({c, 0}, 4, tokens)};
  auto next = jobs[0].next;
  jobs[0].next = [&](const at::Tensor& logits) {
    events.push_back("job");
    return next(logits);
  };
  int64_t hook_steps = 0, processed = 0;
  Driver driver(engine, [&](Engine& e, const StepResult& r) {
    events.push_back("hook");
    ++hook_steps;
    processed += r.stats.tokens_processed;
    e.append(side, {1});
  });
  driver.run(jobs);
  EXPECT_EQ(driver.stats().steps, 3 + 4);  // three prompt chunks, then four tokens run
  EXPECT_EQ(hook_steps, driver.stats().steps);
  EXPECT_EQ(processed, 40 + 4);
  EXPECT_EQ(driver.stats().tokens_processed, processed);
  EXPECT_EQ(engine.context_tokens(side).size(), static_cast<size_t>(hook_steps));
  // After the third step (the prompt's end) every job callback follows a hook call.
  const std::vector<std::string> expected = {"hook", "hook", "hook", "job", "hook", "job", "hook", "job",
                                             "hook", "job", "hook", "job"};
  EXPECT_EQ(events, expected);
  EXPECT_EQ(tokens.size(), 5u);
}

// The driver's tokens equal the same steps taken by hand.
TEST_F(DriverTest, GeneratingJobEqualsTheStepsByHand) {
  const std::vector<int32_t> prompt = seq_tokens(21, 3);
  Engine a(model(), pools(512)), b(model(), pools(512));
  const ContextId ca = a.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  const ContextId cb = b.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  a.append(ca, prompt);
  b.append(cb, prompt);
  std::vector<int32_t> driven;
  std::vector<DriverJob> jobs{greedy_job({ca, 0}, 5, driven)};
  Driver(a).run(jobs);
  std::vector<int32_t> by_hand;
  at::Tensor logits;
  StepWork w;
  w.reader = {cb, 0};
  while (b.pending_tokens({cb, 0}) > 0) logits = b.step({w}).outputs[0].logits;
  w.kind = StepWork::Kind::kPrivate;
  for (int i = 0; i <= 5; ++i) {
    by_hand.push_back(greedy_token(logits[logits.size(0) - 1]));
    if (i == 5) break;
    w.tokens = {by_hand.back()};
    logits = b.step({w}).outputs[0].logits;
  }
  EXPECT_EQ(driven, by_hand);
  EXPECT_EQ(a.private_tokens({ca, 0}), b.private_tokens({cb, 0}));
}

// Two contexts that do not fit together: the second waits (deferred) while the first runs,
// then runs once the first job's on_done released its context.
TEST_F(DriverTest, DeferredWorkIsAskedForAgain) {
  Engine engine(model(), pools(64));  // 4 blocks of 16 per lane
  std::vector<ContextId> contexts;
  std::vector<std::vector<int32_t>> tokens(2);
  std::vector<DriverJob> jobs;
  for (int i = 0; i < 2; ++i) {
    contexts.push_back(engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr}));
    engine.append(contexts.back(), seq_tokens(40, 1 + 10 * i));  // 3 blocks each
  }
  for (int i = 0; i < 2; ++i) {
    jobs.push_back(greedy_job({contexts[static_cast<size_t>(i)], 0}, 2, tokens[static_cast<size_t>(i)]));
    jobs.back().max_chunk = 48;
    jobs.back().on_done = [&engine, c = contexts[static_cast<size_t>(i)]] { engine.release_context(c); };
  }
  Driver driver(engine);
  driver.run(jobs);
  EXPECT_GE(driver.stats().deferred, 1);
  EXPECT_EQ(tokens[0].size(), 3u);
  EXPECT_EQ(tokens[1].size(), 3u);
  EXPECT_EQ(engine.cache().stats().bytes_in_use, 0);
}

// Work that cannot fit even alone: CapacityError naming the pool and the numbers.
TEST_F(DriverTest, NothingAdmittedIsACapacityError) {
  Engine engine(model(), pools(32));  // 2 blocks of 16 per lane
  const ContextId c = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  engine.append(c, seq_tokens(60));  // chunks of 16: the third needs a third block
  int64_t bytes_after_last_step = -1;
  try {
    prefill(engine, {c, 0}, [&](Engine& e, const StepResult&) { bytes_after_last_step = e.cache().stats().bytes_in_use; });
    FAIL() << "no CapacityError";
  } catch (const CapacityError& e) {
    EXPECT_NE(std::string(e.what()).find("base pool"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("kv_pool_bytes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(engine.pending_tokens({c, 0}), 60 - 32);
  EXPECT_EQ(engine.cache().stats().bytes_in_use, bytes_after_last_step) << "the refused chunk left nothing behind";
}

// A reader that read rows another wrote has no logits of its own at the context's end: a job
// that generates from there must bring a suffix, else ConfigError. With one it runs.
TEST_F(DriverTest, GeneratingWithoutLogitsNeedsASuffix) {
  Engine engine(model(), pools(512));
  const ContextId c = engine.create_context({SharingMode::kFullShared, SharedWriter::kFirst}, {nullptr, nullptr});
  engine.append(c, seq_tokens(20));
  prefill(engine, {c, 0});
  std::vector<int32_t> out;
  std::vector<DriverJob> jobs{greedy_job({c, 1}, 2, out)};
  EXPECT_THROW(Driver(engine).run(jobs), ConfigError);
  jobs[0].suffix = {3, 4};
  Driver(engine).run(jobs);
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(engine.private_tokens({c, 1}).size(), 2u + 2u);
}

}  // namespace
}  // namespace lorakv::runtime

// tests/runtime/driver_test.cpp: the one loop over Engine::step (runtime/driver.h), on the
// tiny model (tests/runtime/tiny_engine_model.h): the step hook sees every step, before the
// jobs see its outputs, and may change the engine; deferred work is asked for again; a step
// that can admit nothing is a CapacityError; a job with nothing to start generating from is
// a ConfigError; a generating job equals the same work stepped by hand; a hook that throws
// comes after every job has its output; teacher-forced jobs get every row, with eviction
// between chunks.
#include "lorakv/runtime/driver.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// The step token budget (vLLM's chunked prefill): a long append is processed in chunks of
// what the decoding jobs leave, every decoding job gets its token in every step, and no step
// runs more than the budget.
TEST_F(DriverTest, BudgetKeepsEveryDecodeGoingBesideALongPrefill) {
  Engine engine(model(), pools(2048));
  constexpr int64_t kBudget = 24;
  constexpr int kDecoders = 3, kTokens = 12;
  std::vector<std::vector<int32_t>> out(kDecoders);
  std::vector<int64_t> tokens_per_step;
  Driver driver(engine, [&](Engine&, const StepResult& r) { tokens_per_step.push_back(r.stats.tokens_processed); },
                DriverOptions{kBudget});
  for (int d = 0; d < kDecoders; ++d) {
    const ContextId c = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
    engine.append(c, seq_tokens(4, d + 1));
    driver.add(greedy_job({c, 0}, kTokens, out[static_cast<size_t>(d)]));
  }
  // The decoders' short prompts run first (steps of at most the budget); then the long one joins.
  while (std::any_of(out.begin(), out.end(), [](const auto& o) { return o.empty(); })) driver.step();
  const ContextId long_context = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  engine.append(long_context, seq_tokens(200, 5));
  DriverJob prefill_job;
  prefill_job.reader = {long_context, 0};
  driver.add(std::move(prefill_job));
  std::vector<size_t> before(kDecoders);
  const size_t first_step = tokens_per_step.size();
  while (engine.pending_tokens({long_context, 0}) > 0) {
    for (size_t d = 0; d < out.size(); ++d) before[d] = out[d].size();
    ASSERT_TRUE(driver.step());
    for (size_t d = 0; d < out.size(); ++d) {
      if (before[d] <= static_cast<size_t>(kTokens)) {
        EXPECT_EQ(out[d].size(), before[d] + 1) << "decoder " << d << " got no token in a prefill step";
      }
    }
  }
  for (size_t s = 0; s < tokens_per_step.size(); ++s) EXPECT_LE(tokens_per_step[s], kBudget) << "step " << s;
  // 200 tokens at most 24 - 3 per step: the prefill took at least 10 steps (chunked, not one).
  EXPECT_GE(tokens_per_step.size() - first_step, 200u / (kBudget - kDecoders));
  while (driver.step()) {
  }
  EXPECT_EQ(driver.num_jobs(), 0u);
}

// Without a budget the same long append runs in prefill_chunk pieces beside the decoders:
// the budget is what bounds a step (the test above is sensitive to it).
TEST_F(DriverTest, WithoutBudgetAStepRunsWholeChunks) {
  Engine engine(model(), pools(2048));
  const ContextId c = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  engine.append(c, seq_tokens(40));
  std::vector<int64_t> processed;
  Driver hooked(engine, [&](Engine&, const StepResult& r) { processed.push_back(r.stats.tokens_processed); });
  DriverJob job2;
  job2.reader = {c, 0};
  hooked.add(std::move(job2));
  while (hooked.step()) {
  }
  EXPECT_EQ(processed, (std::vector<int64_t>{16, 16, 8}));  // prefill_chunk 16
}

// Priority orders who runs when the budget is short; a group's cap limits its jobs together.
TEST_F(DriverTest, PriorityAndGroupCapShareAShortBudget) {
  Engine engine(model(), pools(2048));
  std::vector<ReaderRef> readers;
  for (int i = 0; i < 3; ++i) {
    const ContextId c = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
    engine.append(c, seq_tokens(30, i + 1));
    readers.push_back({c, 0});
  }
  std::vector<std::vector<int64_t>> ran(3);
  Driver driver(engine, nullptr, DriverOptions{20});
  for (int i = 0; i < 3; ++i) {
    DriverJob job;
    job.reader = readers[static_cast<size_t>(i)];
    job.max_chunk = 30;
    job.priority = i == 2 ? 1 : 0;  // the last added goes first
    job.group = i == 2 ? 7 : 3;
    job.group_token_cap = i == 2 ? 0 : 6;  // jobs 0 and 1 share 6 tokens a step
    job.on_output = [&ran, i](const StepOutput& out) { ran[static_cast<size_t>(i)].push_back(out.tokens_processed); };
    driver.add(std::move(job));
  }
  ASSERT_TRUE(driver.step());
  ASSERT_EQ(ran[2].size(), 1u);
  EXPECT_EQ(ran[2][0], 20) << "the high-priority job takes the whole budget";
  EXPECT_TRUE(ran[0].empty() && ran[1].empty());
  ASSERT_TRUE(driver.step());
  EXPECT_EQ(ran[2].back(), 10);  // its last 10 tokens
  ASSERT_EQ(ran[0].size(), 1u);
  EXPECT_EQ(ran[0][0], 6) << "job 0 is held to its group's cap";
  EXPECT_TRUE(ran[1].empty()) << "job 1 shares the cap job 0 used up";
}

// Jobs added between steps join the next step; a cancelled job's on_done runs and its work
// stops; a job whose callback throws fails alone through on_error.
TEST_F(DriverTest, AddCancelAndFailOneJobWhileOthersRun) {
  Engine engine(model(), pools(2048));
  Driver driver(engine);
  std::vector<ContextId> contexts;
  for (int i = 0; i < 3; ++i) {
    contexts.push_back(engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr}));
    engine.append(contexts.back(), seq_tokens(6, i + 2));
  }
  std::vector<int32_t> a, b, c;
  bool b_done = false, c_failed = false;
  driver.add(greedy_job({contexts[0], 0}, 6, a));
  DriverJob jb = greedy_job({contexts[1], 0}, 100, b);
  jb.on_done = [&] { b_done = true; };
  const JobId b_id = driver.add(std::move(jb));
  DriverJob jc = greedy_job({contexts[2], 0}, 100, c);
  jc.next = [&](const at::Tensor&) -> std::optional<int32_t> { throw ConfigError("callback failed"); };
  jc.on_error = [&](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const ConfigError&) {
      c_failed = true;
    }
  };
  driver.add(std::move(jc));
  ASSERT_TRUE(driver.step());  // the prompts
  ASSERT_TRUE(driver.step());  // the first tokens: c's callback throws
  EXPECT_TRUE(c_failed);
  EXPECT_TRUE(driver.cancel(b_id));
  EXPECT_TRUE(b_done);
  EXPECT_FALSE(driver.cancel(b_id));
  const size_t b_tokens = b.size();
  while (driver.step()) {
  }
  EXPECT_EQ(b.size(), b_tokens) << "a cancelled job ran on";
  EXPECT_EQ(a.size(), 7u);  // 6 run, the 7th ends it
  // a alone gives the same tokens.
  Engine alone(model(), pools(2048));
  const ContextId x = alone.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  alone.append(x, seq_tokens(6, 2));
  std::vector<int32_t> a_alone;
  std::vector<DriverJob> jobs{greedy_job({x, 0}, 6, a_alone)};
  Driver(alone).run(jobs);
  EXPECT_EQ(a, a_alone);
}

// A hook that throws after a committed step: the step's rows stand, every job of the step
// has its output first, the error comes out of step(), and the jobs go on from there to the
// same tokens as without the failure.
TEST_F(DriverTest, AHookFailureComesAfterEveryJobHasItsOutput) {
  auto run_two = [&](int64_t throw_at_step, std::vector<int32_t>& a, std::vector<int32_t>& b, int64_t& outputs_at_throw) {
    Engine engine(model(), pools(1024));
    // Two contexts of other prompts: each job runs every step (none waits for the other's rows).
    const ContextId c[2] = {engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr}),
                            engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr})};
    engine.append(c[0], seq_tokens(20, 5));
    engine.append(c[1], seq_tokens(20, 6));
    int64_t steps = 0, outputs = 0;
    Driver driver(engine, [&](Engine&, const StepResult&) {
      if (++steps == throw_at_step) throw ConfigError("hook failed");
    });
    for (int32_t j = 0; j < 2; ++j) {
      DriverJob job = greedy_job({c[j], 0}, 6, j == 0 ? a : b);
      job.on_output = [&](const StepOutput&) { ++outputs; };
      driver.add(std::move(job));
    }
    bool threw = false;
    while (true) {
      try {
        if (!driver.step()) break;
      } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("hook failed"), std::string::npos);
        threw = true;
        outputs_at_throw = outputs;
        // The step stands: both readers hold its private token.
        EXPECT_EQ(engine.private_tokens({c[0], 0}).size(), static_cast<size_t>(steps - 2));
        EXPECT_EQ(engine.private_tokens({c[1], 0}).size(), static_cast<size_t>(steps - 2));
      }
    }
    EXPECT_EQ(threw, throw_at_step > 0);
  };
  std::vector<int32_t> a_ref, b_ref, a, b;
  int64_t unused = 0, outputs_at_throw = 0;
  run_two(0, a_ref, b_ref, unused);
  run_two(4, a, b, outputs_at_throw);  // steps 1-2: each reader's prompt; 3, 4: tokens
  EXPECT_EQ(outputs_at_throw, 2 * 4) << "every job of the failed step had its output";
  EXPECT_EQ(a, a_ref);
  EXPECT_EQ(b, b_ref);
  EXPECT_EQ(a.size(), 7u);
}

// The teacher-forced job kind: every chunk's rows reach on_output, equal to one step over
// the whole text by hand, and with a policy the driver evicts between chunks (the rows kept
// never exceed the budget and a chunk).
TEST_F(DriverTest, TeacherForcedChunksGiveEveryRowAndEvictBetweenThem) {
  const std::vector<int32_t> text = seq_tokens(70, 9);
  Engine whole(model(), pools(512));
  const ContextId cw = whole.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  whole.append(cw, text);
  StepWork w;
  w.reader = {cw, 0};
  w.max_tokens = 70;
  w.all_logits = true;
  const at::Tensor expected = whole.step({w}).outputs[0].logits;  // float32 [70, vocab]

  for (const bool evicting : {false, true}) {
    Engine engine(model(), pools(512));
    ContextOptions options{SharingMode::kFull, SharedWriter::kFirst};
    if (evicting) {
      options.eviction.policy = "streaming_llm";
      options.eviction.budget_tokens = 24;
    }
    const ContextId c = engine.create_context(options, {nullptr});
    engine.append(c, text);
    std::vector<at::Tensor> chunks;
    int64_t most_kept = 0;
    std::vector<DriverJob> jobs(1);
    jobs[0].reader = {c, 0};
    jobs[0].all_logits = true;
    jobs[0].on_output = [&](const StepOutput& out) {
      EXPECT_EQ(out.logits.size(0), out.tokens_processed);
      EXPECT_EQ(out.first_position, static_cast<int64_t>(16 * chunks.size()));
      chunks.push_back(out.logits);
    };
    Driver driver(engine, [&](Engine& e, const StepResult&) {
      most_kept = std::max(most_kept, static_cast<int64_t>(e.kept_positions(c).front().size()));
    });
    driver.run(jobs);
    ASSERT_EQ(chunks.size(), 5u);  // 70 tokens in chunks of 16
    const at::Tensor all = at::cat(chunks);
    ASSERT_EQ(all.sizes(), expected.sizes());
    if (!evicting) {
      EXPECT_LT(lorakv::testing::relative_error(all, expected), lorakv::testing::kFloat32LogitsTolerance);
      EXPECT_EQ(most_kept, 70);
    } else {
      // The first chunks read every row; after the first eviction they differ.
      EXPECT_LT(lorakv::testing::relative_error(chunks[0], expected.narrow(0, 0, 16)), lorakv::testing::kFloat32LogitsTolerance);
      EXPECT_LE(most_kept, 24);
      EXPECT_GT(driver.stats().rows_evicted, 0);
    }
  }
}

// forced_decode_job runs its tokens one a step, whatever the logits say.
TEST_F(DriverTest, ForcedDecodeRunsItsTokensOneAStep) {
  Engine engine(model(), pools(512));
  const ContextId c = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  engine.append(c, seq_tokens(10));
  const std::vector<int32_t> forced = {3, 1, 4, 1, 5};
  std::vector<DriverJob> jobs{forced_decode_job({c, 0}, forced)};
  Driver driver(engine);
  driver.run(jobs);
  EXPECT_EQ(engine.private_tokens({c, 0}), forced);
  EXPECT_EQ(driver.stats().steps, 1 + 5);  // the prompt, then a token a step
  EXPECT_THROW(forced_decode_job({c, 0}, {}), InvalidArgumentError);
}

}  // namespace
}  // namespace lorakv::runtime

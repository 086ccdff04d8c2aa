// tests/runtime/engine_rerotate_test.cpp: endless streaming (EngineOptions::rerotate) on the
// tiny engine model. Keys are stored before RoPE and the kernel rotates each to its row's
// index in the rows read, queries to the index their row takes:
//   - without eviction, index = position, so a rerotating engine gives the plain engine's
//     logits (float32: the same rotation of the same values, done by the kernel instead of
//     the model; the project's float32 logits tolerance);
//   - with streaming_llm at a token budget, a session runs 3x past the model's context (64
//     positions): finite logits, every RoPE position below the context, and the last logits
//     close to a fresh context holding only the kept tokens at positions 0.. (the window-only
//     baseline), closer than the same session without rerotate, whose positions run past
//     the context;
//   - a context exported mid-stream (past the context) and imported into a fresh rerotating
//     engine streams on with the original's logits bit for bit; its rows go into no engine
//     that stores keys after RoPE, and no such rows into a rerotating engine;
//   - a scoring policy and per-head token sets are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/engine.h"
#include "tests/runtime/tiny_engine_model.h"
#include "tests/support/reference_values.h"
#include "tests/runtime/step_then_evict.h"

namespace lorakv::runtime {
namespace {

using lorakv::testing::TinyEngineModel;

std::vector<int32_t> tokens(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 48);
  return t;
}

EngineOptions pools(bool rerotate, int64_t chunk = 8) {
  EngineOptions eo;
  eo.base_rows = eo.residual_rows = 1024;
  eo.prefill_chunk = chunk;
  eo.rerotate = rerotate;
  return eo;
}

// All logits of a session: the context in chunks, a private turn, a commit, more context,
// then a few decode steps of private tokens (float32 rows, concatenated).
at::Tensor session_logits(const LlamaModel& model, bool rerotate, SharingMode mode,
                          const std::vector<std::shared_ptr<const adapters::Adapter>>& readers) {
  Engine e(model, pools(rerotate));
  const ContextId ctx = e.create_context({mode, SharedWriter::kFirst}, readers);
  std::vector<at::Tensor> out;
  auto step = [&](const std::vector<StepWork>& work) {
    const StepResult r = lorakv::testing::step_then_evict(e, work);
    EXPECT_TRUE(r.ok);
    for (const StepOutput& o : r.outputs) out.push_back(o.logits);
  };
  e.append(ctx, tokens(70, 1));
  for (int32_t r = 0; r < static_cast<int32_t>(readers.size()); ++r) {
    while (e.pending_tokens({ctx, r}) > 0) step({{{ctx, r}, StepWork::Kind::kContext, {}, 0, true}});
  }
  step({{{ctx, 0}, StepWork::Kind::kPrivate, tokens(5, 2), 0, true}});
  e.commit_private({ctx, 0});
  e.append(ctx, tokens(11, 3));
  for (int32_t r = 0; r < static_cast<int32_t>(readers.size()); ++r) {
    while (e.pending_tokens({ctx, r}) > 0) step({{{ctx, r}, StepWork::Kind::kContext, {}, 0, true}});
  }
  for (int32_t t : tokens(4, 4)) {
    std::vector<StepWork> work;
    for (int32_t r = 0; r < static_cast<int32_t>(readers.size()); ++r) work.push_back({{ctx, r}, StepWork::Kind::kPrivate, {t}, 0, false});
    step(work);
  }
  return at::cat(out, 0);
}

TEST(EngineRerotate, WithoutEvictionItIsThePlainEngine) {
  const TinyEngineModel tiny = lorakv::testing::make_tiny_engine_model();
  const auto a = lorakv::testing::make_tiny_adapter(*tiny.model, "a", 1, 10);
  const auto b = lorakv::testing::make_tiny_adapter(*tiny.model, "b", 1, 11);
  for (SharingMode mode : {SharingMode::kFull, SharingMode::kBaseShared, SharingMode::kBaseLrShared}) {
    SCOPED_TRACE(sharing_mode_name(mode));
    const std::vector<std::shared_ptr<const adapters::Adapter>> readers =
        mode == SharingMode::kFull ? std::vector<std::shared_ptr<const adapters::Adapter>>{nullptr, a}
                                   : std::vector<std::shared_ptr<const adapters::Adapter>>{a, b};
    const at::Tensor plain = session_logits(*tiny.model, false, mode, readers);
    const at::Tensor rerotated = session_logits(*tiny.model, true, mode, readers);
    ASSERT_EQ(plain.sizes(), rerotated.sizes());
    EXPECT_LE(lorakv::testing::relative_error(rerotated, plain), lorakv::testing::kFloat32LogitsTolerance);
  }
}

// KL(softmax(ref) || softmax(x)) of one row of logits, nats.
double kl(const at::Tensor& ref, const at::Tensor& x) {
  const at::Tensor lp = ref.log_softmax(-1), lq = x.log_softmax(-1);
  return (lp.exp() * (lp - lq)).sum().item<double>();
}

struct Streamed {
  at::Tensor last;                 // float32 [vocab]: the last decode step's logits
  std::vector<int32_t> kept;       // the kept positions of the first lane, then the decoded token's
  std::vector<int32_t> trajectory;
  bool finite = true;
  int64_t most_rows = 0;           // the most rows a lane held after a step
};

// 3x the 64-position context appended 8 tokens at a time, streaming_llm keeping 24 tokens.
Streamed stream(const LlamaModel& model, bool rerotate) {
  Engine e(model, pools(rerotate));
  ContextOptions o{SharingMode::kFull, SharedWriter::kFirst};
  o.eviction.policy = "streaming_llm";
  o.eviction.budget_tokens = 24;
  o.eviction.sinks = 4;
  const ContextId ctx = e.create_context(o, {nullptr});
  if (rerotate) {
    EXPECT_GT(e.context_limit(ctx), e.max_context_tokens());
  }
  Streamed s;
  s.trajectory = tokens(192, 7);
  for (size_t i = 0; i < s.trajectory.size(); i += 8) {
    e.append(ctx, std::vector<int32_t>(s.trajectory.begin() + static_cast<int64_t>(i), s.trajectory.begin() + static_cast<int64_t>(i) + 8));
    const StepResult r = lorakv::testing::step_then_evict(e, {{{ctx, 0}, StepWork::Kind::kContext, {}, 0, true}});
    EXPECT_TRUE(r.ok);
    s.finite = s.finite && at::isfinite(r.outputs[0].logits).all().item<bool>();
    for (const std::vector<int32_t>& lane : e.kept_positions(ctx)) s.most_rows = std::max<int64_t>(s.most_rows, static_cast<int64_t>(lane.size()));
  }
  s.kept = e.kept_positions(ctx).front();
  const StepResult r = lorakv::testing::step_then_evict(e, {{{ctx, 0}, StepWork::Kind::kPrivate, {5}, 0, false}});
  s.last = r.outputs[0].logits[0];
  return s;
}

TEST(EngineRerotate, StreamsThreeTimesPastTheModelsContext) {
  const TinyEngineModel tiny = lorakv::testing::make_tiny_engine_model(/*context_length=*/64);
  const Streamed rerotated = stream(*tiny.model, true);
  const Streamed plain = stream(*tiny.model, false);
  EXPECT_TRUE(rerotated.finite);
  // Rows kept stay under the context: the RoPE positions (their indices) do too.
  EXPECT_LT(rerotated.most_rows + 1, 64);
  ASSERT_EQ(rerotated.kept, plain.kept) << "the same positions are kept either way";
  EXPECT_EQ(rerotated.kept.back(), 191);
  // The window-only baseline: the kept tokens alone, at positions 0.., then the same token.
  Engine fresh(*tiny.model, pools(false));
  const ContextId ctx = fresh.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  std::vector<int32_t> kept_tokens;
  for (int32_t p : rerotated.kept) kept_tokens.push_back(rerotated.trajectory[static_cast<size_t>(p)]);
  fresh.append(ctx, kept_tokens);
  while (fresh.pending_tokens({ctx, 0}) > 0) lorakv::testing::step_then_evict(fresh, {{{ctx, 0}, StepWork::Kind::kContext, {}, 0, false}});
  const at::Tensor baseline = lorakv::testing::step_then_evict(fresh, {{{ctx, 0}, StepWork::Kind::kPrivate, {5}, 0, false}}).outputs[0].logits[0];
  const double kl_rerotated = kl(baseline, rerotated.last), kl_plain = kl(baseline, plain.last);
  std::cout << "[rerotate] KL against the window-only baseline: " << kl_rerotated << " rerotated, " << kl_plain
            << " at true positions past the context\n";
  EXPECT_LT(kl_rerotated, kl_plain);
}

// Appends trajectory[from, to) 8 tokens at a time, one step each; the logits of every step.
std::vector<at::Tensor> stream_on(Engine& e, ContextId ctx, const std::vector<int32_t>& trajectory, size_t from, size_t to) {
  std::vector<at::Tensor> out;
  for (size_t i = from; i < to; i += 8) {
    e.append(ctx, std::vector<int32_t>(trajectory.begin() + static_cast<int64_t>(i), trajectory.begin() + static_cast<int64_t>(i) + 8));
    const StepResult r = lorakv::testing::step_then_evict(e, {{{ctx, 0}, StepWork::Kind::kContext, {}, 0, true}});
    EXPECT_TRUE(r.ok);
    if (r.ok) out.push_back(r.outputs[0].logits);
  }
  return out;
}

TEST(EngineRerotate, AContextSavedPastTheModelsContextStreamsOnAlike) {
  const TinyEngineModel tiny = lorakv::testing::make_tiny_engine_model(/*context_length=*/64);
  const std::vector<int32_t> trajectory = tokens(192, 7);
  ContextOptions o{SharingMode::kFull, SharedWriter::kFirst};
  o.eviction.policy = "streaming_llm";
  o.eviction.budget_tokens = 24;
  o.eviction.sinks = 4;
  Engine original(*tiny.model, pools(true));
  const ContextId ctx = original.create_context(o, {nullptr});
  (void)stream_on(original, ctx, trajectory, 0, 96);  // 1.5x the context
  const ContextRows rows = original.export_context(ctx, {0});
  EXPECT_TRUE(rows.keys_before_rope);
  Engine restored(*tiny.model, pools(true));
  const ContextId back = restored.import_context(rows, {nullptr});
  EXPECT_EQ(restored.kept_positions(back), original.kept_positions(ctx));
  const std::vector<at::Tensor> a = stream_on(original, ctx, trajectory, 96, 192);
  const std::vector<at::Tensor> b = stream_on(restored, back, trajectory, 96, 192);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::equal(a[i], b[i])) << "step " << i << " after the restore";
  }
  // Keys before RoPE into an engine that stores them after it, and the reverse: refused.
  Engine plain(*tiny.model, pools(false));
  try {
    plain.import_context(rows, {nullptr});
    ADD_FAILURE() << "an engine storing keys after RoPE took keys before it";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.context().key, "rerotate");
  }
  const ContextId plain_ctx = plain.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  (void)stream_on(plain, plain_ctx, trajectory, 0, 16);
  const ContextRows after_rope = plain.export_context(plain_ctx, {0});
  EXPECT_FALSE(after_rope.keys_before_rope);
  EXPECT_THROW(restored.import_context(after_rope, {nullptr}), ConfigError);
}

TEST(EngineRerotate, WhatItCannotServeIsRefused) {
  const TinyEngineModel tiny = lorakv::testing::make_tiny_engine_model();
  Engine e(*tiny.model, pools(true));
  ContextOptions h2o{SharingMode::kFull, SharedWriter::kFirst};
  h2o.eviction.policy = "h2o";
  h2o.eviction.budget_tokens = 24;
  EXPECT_THROW(e.create_context(h2o, {nullptr}), ConfigError);
  EngineOptions per_head = pools(true);
  per_head.per_head_token_sets = true;
  EXPECT_THROW(Engine(*tiny.model, per_head), ConfigError);
  const ContextId ctx = e.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr});
  // Without a token budget below the context, the context keeps the model's limit.
  EXPECT_EQ(e.context_limit(ctx), e.max_context_tokens());
}

}  // namespace
}  // namespace lorakv::runtime

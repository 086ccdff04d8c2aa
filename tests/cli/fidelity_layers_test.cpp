// tests/cli/fidelity_layers_test.cpp: the per-layer probes of `lorakv bench memory --parts
// fidelity` (cli/bench/fidelity_layers.h). LayerRowError's arithmetic on small tensors; then, on
// the real model with dense float32 weights (as the bench replays) and the trained role
// adapters, one held-out trajectory replayed teacher-forced as the bench does, in `full` and
// in shared modes:
//   - where the modes' definitions (docs/sharing_modes.md) make the rows a reader sees its own
//     `full` rows, they are: at layer 0 with writer `base` (the first layer's input is the
//     token embedding, the same for every reader), and in full_shared over rows the reader
//     wrote itself; where they do not (later layers, all-linear adapters), the rows differ by
//     far more than rounding, so the checks can tell;
//   - the swap: every layer swapped gives the reader's `full` logits, no layer the mode's, a
//     band in the middle neither, and it changes only the band's rows;
//   - a band out of range, or own rows of another context, is refused.
#include "lorakv/cli/bench/fidelity_layers.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "tests/support/test_settings.h"

namespace lorakv::cli {
namespace {

using runtime::ContextOptions;
using runtime::SharedWriter;
using runtime::SharingMode;

// ---- LayerRowError on synthetic rows ----

// float32 [rows, 1 head, 2] filled with `value`.
at::Tensor filled(int64_t rows, float value) { return at::full({rows, 1, 2}, value, at::kFloat); }

LayerRows two_layers(at::Tensor k0, at::Tensor v0, at::Tensor k1, at::Tensor v1) {
  LayerRows r;
  r.k = {std::move(k0), std::move(k1)};
  r.v = {std::move(v0), std::move(v1)};
  return r;
}

TEST(LayerRowError, IdenticalRowsHaveNoError) {
  const LayerRows own = two_layers(filled(3, 1.5f), filled(3, -2.0f), filled(3, 0.25f), filled(3, 7.0f));
  LayerRowError e;
  e.add(own, own);
  e.add(own, own);
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_EQ(e.k_relative(l), 0.0) << l;
    EXPECT_EQ(e.v_relative(l), 0.0) << l;
  }
}

TEST(LayerRowError, RelativeErrorIsTheRootOfSummedSquaredNorms) {
  // Turn 1, 2 rows of 2 elements (4 elements): own K of layer 0 all 1 (|own|^2 = 4), seen
  // all 1.5 (|diff|^2 = 4 * 0.25 = 1); V of layer 0 own all 2 (16), seen all 2 (0); layer 1
  // K own all -1 (4), seen all 1 (4 * 4 = 16); V own all 3 (36), seen all 0 (36).
  LayerRowError e;
  e.add(two_layers(filled(2, 1.5f), filled(2, 2.0f), filled(2, 1.0f), filled(2, 0.0f)),
        two_layers(filled(2, 1.0f), filled(2, 2.0f), filled(2, -1.0f), filled(2, 3.0f)));
  EXPECT_DOUBLE_EQ(e.k_relative(0), std::sqrt(1.0 / 4.0));
  EXPECT_DOUBLE_EQ(e.v_relative(0), 0.0);
  EXPECT_DOUBLE_EQ(e.k_relative(1), std::sqrt(16.0 / 4.0));
  EXPECT_DOUBLE_EQ(e.v_relative(1), std::sqrt(36.0 / 36.0));
  // Turn 2, another length (3 rows: 6 elements): layer 0 K own all 2 (24), seen all 2 (0);
  // V own all 1 (6), seen all 0.5 (6 * 0.25 = 1.5); layer 1 K own all 3 (54), seen equal;
  // V own all 1 (6), seen all 2 (6). The sums, not the mean of the turns' ratios.
  e.add(two_layers(filled(3, 2.0f), filled(3, 0.5f), filled(3, 3.0f), filled(3, 2.0f)),
        two_layers(filled(3, 2.0f), filled(3, 1.0f), filled(3, 3.0f), filled(3, 1.0f)));
  EXPECT_DOUBLE_EQ(e.k_relative(0), std::sqrt((1.0 + 0.0) / (4.0 + 24.0)));
  EXPECT_DOUBLE_EQ(e.v_relative(0), std::sqrt((0.0 + 1.5) / (16.0 + 6.0)));
  EXPECT_DOUBLE_EQ(e.k_relative(1), std::sqrt((16.0 + 0.0) / (4.0 + 54.0)));
  EXPECT_DOUBLE_EQ(e.v_relative(1), std::sqrt((36.0 + 6.0) / (36.0 + 6.0)));
}

// ---- On the real model ----

// One replay of the trajectory (role_turn_replay.h), as the bench's probes see it.
struct Replay {
  std::vector<RoleTurnInfo> turns;         // per role turn
  std::vector<TurnLogits> logits;          // per role turn: float32 [text tokens + 1, vocab]
  std::vector<runtime::ContextRows> rows;  // shared modes: before each role turn, every reader's rows
  std::vector<runtime::SequenceRows> own;  // `full`: before each role turn, the turn reader's own rows
};

// Rows the reader sees against its own at layer 0, with writer `base`: the same products
// X W and (X A) B (float32; V comes out bit for bit equal), but RoPE rotates the key's sum
// in `full` and its two terms apart in the shared rows (the base row when written, the
// residual term in rows_reader_sees), and each rotated element (x1 c - x2 s) rounds to a few
// ulps of float32 (eps 1.2e-7) of the terms, which the row's largest element bounds (about 10
// at layer 0, where one ulp is 9.5e-7; measured: 2 ulps). 1e-6 of it is about 10 ulps. Later layers differ by
// 4e-2 and more, so 100 times this separates the two cleanly.
constexpr double kRowTolerance = 1e-6;
// Logits of the same turn over the same rows in another engine (the swap imports the rows
// into a fresh one): the float32 logits tolerance of docs/sharing_modes.md ("Exactness
// checks"), of the largest logit (about 40 here). Measured: equal bit for bit, as the import
// promises; the tolerance leaves summation order free.
constexpr double kLogitTolerance = 1e-5;

// max |a - b| / max |b|: float32 tensors of one shape.
double max_relative(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

class FidelityLayers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    MemoryBenchOptions o;
    o.model_path = lorakv::testing::test_setting("LORAKV_MODEL");
    o.assets_dir = lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/assets";
    std::ostringstream log;
    w_ = std::make_unique<BenchWorkload>(load_workload(o, log));
    // The first held-out trajectory up to the actor's second turn: system, user, planner,
    // actor, tool, planner, actor. Four role turns of two readers: every check has its case
    // (a reader that wrote every shared row, one that wrote none), and the replays stay quick.
    whole_trajectory_ = w_->held_out.at(0);
    trajectory_ = whole_trajectory_;
    trajectory_.turns.resize(7);
  }
  static void TearDownTestSuite() {
    replays_.clear();
    w_.reset();
  }

  static BenchWorkload& w() { return *w_; }
  static const runtime::LlamaModel& model() { return w_->dense_model(); }
  static int64_t layers() { return model().config().num_layers; }
  static const std::vector<AdapterPtr>& readers(const std::string& set) {
    return set == "all_linear" ? w_->all_linear : w_->shared_a;
  }

  // The replay of the trajectory by the three roles of `set` in `mode`, made once per suite.
  // `whole`: the whole trajectory, up to the reflector's verdict (three readers).
  static const Replay& replay(const std::string& set, ContextOptions mode, bool whole = false) {
    const std::string key = set + "," + runtime::sharing_mode_name(mode.mode) + "," +
                            runtime::shared_writer_name(mode.writer) + (whole ? ",whole" : "");
    const auto found = replays_.find(key);
    if (found != replays_.end()) return found->second;
    Replay& r = replays_[key];
    // A `full` replay keeps the turn readers' own rows, as the bench's; a shared mode's the rows
    // its probes export.
    ReplayOptions options;
    if (mode.mode == SharingMode::kFull) options = keep_own_rows(r.own);
    const BeforeRoleTurn keep = options.before_turn;
    options.before_turn = [&r, keep](const RoleTurnInfo& turn, runtime::Engine& engine, runtime::ContextId ctx) {
      r.turns.push_back(turn);
      if (keep) keep(turn, engine, ctx);
      if (engine.context_options(ctx).mode != SharingMode::kFull) r.rows.push_back(export_every_reader(engine, ctx));
    };
    r.logits = replay_turns(w(), readers(set), mode, {whole ? &whole_trajectory_ : &trajectory_}, options);
    return r;
  }
  static const Replay& full(const std::string& set, bool whole = false) {
    return replay(set, {SharingMode::kFull, SharedWriter::kFirst}, whole);
  }

  // Every turn's reader sees its own `full` rows at layer 0 (the embedding is every reader's
  // input there) and rows far from them at every later layer.
  static void expect_exact_at_layer_0_only(const std::string& set, ContextOptions mode) {
    const Replay& f = full(set);
    const Replay& m = replay(set, mode);
    ASSERT_EQ(m.turns.size(), f.own.size());
    ASSERT_EQ(m.turns.size(), 4u);
    LayerRowError e;
    for (size_t i = 0; i < m.turns.size(); ++i) {
      const LayerRows seen = rows_reader_sees(*m.rows[i].shared, readers(set)[m.turns[i].reader].get(), model());
      const LayerRows own = own_rows(f.own[i]);
      EXPECT_LE(max_relative(seen.k[0], own.k[0]), kRowTolerance) << "turn " << i;
      EXPECT_LE(max_relative(seen.v[0], own.v[0]), kRowTolerance) << "turn " << i;
      e.add(seen, own);
    }
    EXPECT_LE(e.k_relative(0), kRowTolerance);
    EXPECT_LE(e.v_relative(0), kRowTolerance);
    std::printf("  %s: layer 0 relative error K %.2e V %.2e; layer 1 K %.2e V %.2e; last K %.2e V %.2e\n",
                set.c_str(), e.k_relative(0), e.v_relative(0), e.k_relative(1), e.v_relative(1),
                e.k_relative(static_cast<size_t>(layers() - 1)), e.v_relative(static_cast<size_t>(layers() - 1)));
    for (size_t l = 1; l < static_cast<size_t>(layers()); ++l) {
      // From layer 1 on the base rows come from the base model's X, not the reader's (its
      // adapters changed its hidden states below), and the residual term makes up only the
      // adapter's K/V part: K and V differ in both sets.
      EXPECT_GT(e.k_relative(l), 100 * kRowTolerance) << "layer " << l;
      EXPECT_GT(e.v_relative(l), 100 * kRowTolerance) << "layer " << l;
    }
  }

 private:
  static inline std::unique_ptr<BenchWorkload> w_;
  static inline BenchTrajectory trajectory_, whole_trajectory_;
  static inline std::map<std::string, Replay> replays_;
};

TEST_F(FidelityLayers, BaseSharedIsExactAtLayer0Only) {
  expect_exact_at_layer_0_only("all_linear", {SharingMode::kBaseShared, SharedWriter::kBase});
}

TEST_F(FidelityLayers, BaseLrSharedIsExactAtLayer0Only) {
  expect_exact_at_layer_0_only("qv_shared_a", {SharingMode::kBaseLrShared, SharedWriter::kBase});
}

TEST_F(FidelityLayers, FullSharedReaderSeesItsOwnRowsWhereItWroteThem) {
  const Replay& f = full("all_linear");
  const Replay& m = replay("all_linear", {SharingMode::kFullShared, SharedWriter::kFirst});
  ASSERT_EQ(m.turns.size(), f.own.size());
  size_t whole = 0, other = 0;
  for (size_t i = 0; i < m.turns.size(); ++i) {
    const runtime::SequenceRows& shared = *m.rows[i].shared;
    const AdapterPtr& reader = readers("all_linear")[m.turns[i].reader];
    // The rows of the prefix this reader wrote depend on nothing another reader wrote: the
    // same computation as its `full` rows, on the same tokens and in the same chunks.
    size_t n = 0;
    while (n < shared.writers.size() && shared.writers[n] == reader->identity()) ++n;
    const auto rows = static_cast<int64_t>(n);
    const LayerRows seen = rows_reader_sees(shared, reader.get(), model()), own = own_rows(f.own[i]);
    for (size_t l = 0; l < seen.k.size(); ++l) {
      EXPECT_TRUE(at::equal(seen.k[l].narrow(0, 0, rows), own.k[l].narrow(0, 0, rows))) << "turn " << i << " layer " << l;
      EXPECT_TRUE(at::equal(seen.v[l].narrow(0, 0, rows), own.v[l].narrow(0, 0, rows))) << "turn " << i << " layer " << l;
    }
    if (n == shared.tokens.size()) ++whole;
    // Rows another reader wrote carry its adapter from layer 0 on: far from this reader's.
    if (n == 0) {
      ++other;
      EXPECT_GT(max_relative(seen.k[0], own.k[0]), 100 * kRowTolerance) << "turn " << i;
    }
  }
  // The planner's first turn: it processed the whole prompt, so it wrote every row; the
  // actor's turns read the planner's rows from the first.
  EXPECT_GE(whole, 1u);
  EXPECT_GE(other, 1u);
}

// Every tensor of two sequences' rows equal (a residual layer without rows undefined in both).
::testing::AssertionResult same_rows(const runtime::SequenceRows& a, const runtime::SequenceRows& b) {
  for (size_t l = 0; l < b.k.size(); ++l) {
    if (!at::equal(a.k[l], b.k[l]) || !at::equal(a.v[l], b.v[l])) return ::testing::AssertionFailure() << "layer " << l;
  }
  for (size_t s = 0; s < b.residuals.size(); ++s) {
    for (size_t l = 0; l < b.residuals[s].c.size(); ++l) {
      const at::Tensor &x = a.residuals[s].c[l], &y = b.residuals[s].c[l];
      if (x.defined() != y.defined() || (y.defined() && !at::equal(x, y))) {
        return ::testing::AssertionFailure() << "residual stream " << s << " layer " << l;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

class FidelitySwap : public FidelityLayers {
 protected:
  // base_shared with writer `base` and the all-linear roles: far from `full` from layer 1 on.
  // Turn 1 is the actor's first: the planner's and its own residual streams are there.
  static constexpr size_t kTurn = 1;
  static const Replay& mode() { return replay("all_linear", {SharingMode::kBaseShared, SharedWriter::kBase}); }
  static const runtime::ContextRows& mode_rows() { return mode().rows[kTurn]; }
  static const runtime::SequenceRows& own() { return full("all_linear").own[kTurn]; }
  static const at::Tensor& full_logits() { return full("all_linear").logits[kTurn].logits; }
  static const at::Tensor& mode_logits() { return mode().logits[kTurn].logits; }
  static at::Tensor swapped_logits(int64_t first, int64_t last) {
    return turn_over_rows(model(), with_own_layers(mode_rows(), own(), first, last), readers("all_linear"),
                          mode().turns[kTurn]);
  }
  // The logits tolerance of this turn, and a difference the checks must see beyond it.
  static double tolerance() { return kLogitTolerance * full_logits().abs().max().item<double>(); }
  static double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }
};

TEST_F(FidelitySwap, EveryLayerSwappedGivesTheReadersFullLogits) {
  ASSERT_EQ(mode().turns[kTurn].role, "actor");
  ASSERT_GT(max_diff(mode_logits(), full_logits()), 100 * tolerance());  // the mode is far from full
  EXPECT_LE(max_diff(swapped_logits(0, layers()), full_logits()), tolerance());
}

// The reflector's turn at the end of the whole trajectory: the rows hold the three readers' K
// and V streams (six residual streams of rank 8 in one pool), which the engine the swap
// imports them into must hold too (it once had room for three).
TEST_F(FidelitySwap, TheLastTurnOfThreeReadersRunsAndEveryLayerGivesFull) {
  const ContextOptions base_shared{SharingMode::kBaseShared, SharedWriter::kBase};
  const Replay& whole = replay("all_linear", base_shared, /*whole=*/true);
  const Replay& whole_full = full("all_linear", /*whole=*/true);
  const size_t turn = whole.turns.size() - 1;
  ASSERT_EQ(whole.turns[turn].role, "reflector");
  const runtime::ContextRows& rows = whole.rows[turn];
  ASSERT_EQ(rows.shared->residuals.size(), 6u);
  const at::Tensor logits = turn_over_rows(model(), with_own_layers(rows, whole_full.own[turn], 0, layers()),
                                           readers("all_linear"), whole.turns[turn]);
  const at::Tensor& want = whole_full.logits[turn].logits;
  EXPECT_LE(max_diff(logits, want), kLogitTolerance * want.abs().max().item<double>());
}

TEST_F(FidelitySwap, AnEmptyBandLeavesTheModesRowsAndLogits) {
  for (const int64_t k : {int64_t{0}, layers() / 2, layers()}) {
    EXPECT_TRUE(same_rows(*with_own_layers(mode_rows(), own(), k, k).shared, *mode_rows().shared)) << "band " << k;
  }
  EXPECT_LE(max_diff(swapped_logits(layers() / 2, layers() / 2), mode_logits()), tolerance());
}

TEST_F(FidelitySwap, AMiddleBandChangesItsLayersOnly) {
  const int64_t first = layers() / 3, last = 2 * layers() / 3;
  const runtime::SequenceRows& before = *mode_rows().shared;
  const runtime::ContextRows swapped = with_own_layers(mode_rows(), own(), first, last);
  const runtime::SequenceRows& after = *swapped.shared;
  ASSERT_EQ(after.k.size(), static_cast<size_t>(layers()));
  ASSERT_GE(after.residuals.size(), 2u);  // the planner's and the actor's K and V streams
  for (int64_t l = 0; l < layers(); ++l) {
    const auto i = static_cast<size_t>(l);
    const bool in_band = first <= l && l < last;
    EXPECT_TRUE(at::equal(after.k[i], in_band ? own().k[i] : before.k[i])) << "layer " << l;
    EXPECT_TRUE(at::equal(after.v[i], in_band ? own().v[i] : before.v[i])) << "layer " << l;
    for (size_t s = 0; s < after.residuals.size(); ++s) {
      const at::Tensor& c = after.residuals[s].c[i];
      if (!c.defined()) continue;
      if (in_band) {
        EXPECT_EQ(c.abs().max().item<double>(), 0.0) << "stream " << s << " layer " << l;
      } else {
        EXPECT_TRUE(at::equal(c, before.residuals[s].c[i])) << "stream " << s << " layer " << l;
        EXPECT_GT(c.abs().max().item<double>(), 0.0) << "stream " << s << " layer " << l;
      }
    }
  }
  // The mode's rows are copied, not changed in place.
  EXPECT_FALSE(at::equal(before.k[static_cast<size_t>(first)], own().k[static_cast<size_t>(first)]));
  const at::Tensor logits = swapped_logits(first, last);
  EXPECT_GT(max_diff(logits, mode_logits()), 100 * tolerance());
  EXPECT_GT(max_diff(logits, full_logits()), 100 * tolerance());
}

// The message of the InvalidArgumentError `call` throws, or "accepted".
template <typename Call>
std::string refusal(Call call) {
  try {
    call();
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  return "accepted";
}

TEST_F(FidelitySwap, BadBandsAndRowsAreRefusedNamingThem) {
  const int64_t n = layers();
  const auto band = [&](int64_t first, int64_t last) {
    return refusal([&] { (void)with_own_layers(mode_rows(), own(), first, last); });
  };
  EXPECT_NE(band(-1, 3).find("[-1, 3)"), std::string::npos) << band(-1, 3);
  EXPECT_NE(band(0, n + 1).find("[0, " + std::to_string(n + 1) + ") are not a band of the " + std::to_string(n)),
            std::string::npos)
      << band(0, n + 1);
  EXPECT_NE(band(5, 4).find("[5, 4)"), std::string::npos) << band(5, 4);
  EXPECT_NE(band(n, n + 1).find("[" + std::to_string(n)), std::string::npos) << band(n, n + 1);

  // The planner's own rows before turn 0: a shorter context than the actor's turn 1.
  const runtime::SequenceRows& shorter = full("all_linear").own[0];
  ASSERT_LT(shorter.tokens.size(), own().tokens.size());
  const std::string length = refusal([&] { (void)with_own_layers(mode_rows(), shorter, 0, 1); });
  EXPECT_NE(length.find(std::to_string(shorter.tokens.size()) + " tokens, the mode's rows " +
                        std::to_string(own().tokens.size())),
            std::string::npos)
      << length;

  runtime::SequenceRows other_tokens = own();
  other_tokens.tokens[1] += 1;
  EXPECT_NE(refusal([&] { (void)with_own_layers(mode_rows(), other_tokens, 0, 1); }).find("other tokens"),
            std::string::npos);
  runtime::SequenceRows fewer_layers = own();
  fewer_layers.k.pop_back();
  fewer_layers.v.pop_back();
  EXPECT_NE(refusal([&] { (void)with_own_layers(mode_rows(), fewer_layers, 0, 1); })
                .find(std::to_string(n - 1) + " layers"),
            std::string::npos);
  runtime::ContextRows no_shared = mode_rows();
  no_shared.shared.reset();
  EXPECT_NE(refusal([&] { (void)with_own_layers(no_shared, own(), 0, 1); }).find("no shared rows"), std::string::npos);
}

}  // namespace
}  // namespace lorakv::cli

// tests/runtime/engine_author_rows_test.cpp: writer `author`'s fast form in base_shared and
// base_lr_shared on the tiny model (tests/runtime/tiny_engine_model.h). While an agent
// replies, the engine keeps its rows a second time in the shared layout (base rows from its
// hidden states and the C rows it fills: EngineOptions::keep_author_rows), and the commit
// adopts them: the shared rows then equal, row by row, those of an engine that processed the
// reply again at commit (the plain form, keep_author_rows false). Each fallback to the plain
// form is tested: text appended meanwhile, a second agent replying at once, a reply dropped
// (an agent with a private instruction: its session drops the private rows and appends the
// turn), an aLoRA reader; and in base_shared the other readers still build their own C_i.
// (The commit table in every mode: engine_reuse_test.cpp,
// CommitAdoptsPrivateRowsWhereTheyEqualTheContextRows.)
#include <gtest/gtest.h>

#include <vector>

#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "tests/runtime/tiny_engine_model.h"
#include "tests/support/reference_values.h"

namespace lorakv::runtime {
namespace {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;
using Tokens = std::vector<int32_t>;
constexpr double kTolerance = lorakv::testing::kFloat32LogitsTolerance;

Tokens text(int32_t n, int32_t seed = 3) {
  Tokens t;
  for (int32_t i = 0; i < n; ++i) t.push_back((seed + i * 5) % 48);
  return t;
}

const Tokens kReply = {7, 19, 31, 2, 44, 13, 8, 25, 40, 11, 6, 29, 35, 1, 22, 17, 9, 38, 4};  // crosses a block
const Tokens kNext = {5, 17};

EngineOptions engine_options(bool keep_author_rows) {
  EngineOptions eo;
  eo.prefill_chunk = 7;
  eo.keep_author_rows = keep_author_rows;
  return eo;
}

// Largest |a - b| over largest |b| of two row tensors of one shape.
double rows_error(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  const double scale = b.abs().max().item<double>();
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / (scale > 0 ? scale : 1);
}

class EngineAuthorRows : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = lorakv::testing::make_tiny_engine_model();
    // One A for both (a base_lr_shared group), other B; k, q and v adapted: the K stream too.
    const std::vector<adapters::ModuleId> qkv = {adapters::ModuleId::kQ, adapters::ModuleId::kK, adapters::ModuleId::kV};
    planner_ = lorakv::testing::make_tiny_adapter(*tiny_.model, "planner", 1, 11, 2, qkv);
    actor_ = lorakv::testing::make_tiny_adapter(*tiny_.model, "actor", 1, 22, 2, qkv);
  }

  // A context of 40 tokens both readers processed.
  // Reader 0: the planner, or with `base_reader` the base model (no adapter).
  ContextId prepared(Engine& engine, SharingMode mode, bool base_reader = false) {
    const ContextId c =
        engine.create_context({mode, SharedWriter::kAuthor}, {base_reader ? nullptr : planner_, actor_});
    engine.append(c, text(40));
    prefill(engine, {c, 0});
    prefill(engine, {c, 1});
    return c;
  }
  // `reader`'s reply kReply in two private works (a reply decodes over several steps).
  static void reply(Engine& engine, ContextId c, int32_t reader) {
    engine.step({StepWork::private_tokens({c, reader}, Tokens(kReply.begin(), kReply.begin() + 12))});
    engine.step({StepWork::private_tokens({c, reader}, Tokens(kReply.begin() + 12, kReply.end()))});
  }
  // Both readers' logits for kNext once they processed the context.
  static std::vector<at::Tensor> next_logits(Engine& engine, ContextId c) {
    std::vector<at::Tensor> out;
    for (int32_t r : {0, 1}) {
      prefill(engine, {c, r});
      out.push_back(engine.step({StepWork::private_tokens({c, r}, kNext, true)}).outputs[0].logits);
      engine.drop_private({c, r});
    }
    return out;
  }

  lorakv::testing::TinyEngineModel tiny_;
  AdapterPtr planner_, actor_;
};

// The adopted rows are the rows the plain form writes: base K and V and every C stream, row
// by row over the whole context, with the same writers. Fails when the author rows are
// written from the adapted K/V (the full rows) or the C rows from other hidden states. The
// author is an adapter, or the base model (its reply's rows are base rows, and in
// base_lr_shared the shared C from its hidden states).
TEST_F(EngineAuthorRows, TheAdoptedRowsAreTheRowsTheAuthorWritesWhenItProcessesItsReplyAgain) {
  for (const auto& [mode, base_reader] : {std::pair{SharingMode::kBaseShared, false}, {SharingMode::kBaseLrShared, false},
                                         {SharingMode::kBaseShared, true}, {SharingMode::kBaseLrShared, true}}) {
    SCOPED_TRACE(std::string(sharing_mode_name(mode)) + (base_reader ? ", the base model replying" : ""));
    Engine fast(*tiny_.model, engine_options(true)), plain(*tiny_.model, engine_options(false));
    const ContextId f = prepared(fast, mode, base_reader), p = prepared(plain, mode, base_reader);
    reply(fast, f, 0);
    reply(plain, p, 0);
    // While it replies, the fast form holds the reply's rows twice.
    EXPECT_GT(fast.context_memory(f).private_bytes, plain.context_memory(p).private_bytes);
    fast.commit_private({f, 0});
    plain.commit_private({p, 0});
    EXPECT_EQ(fast.adopted_commits(), 1);
    EXPECT_EQ(fast.committed_tokens_processed_again(), 0);
    EXPECT_EQ(plain.adopted_commits(), 0);
    EXPECT_EQ(plain.committed_tokens_processed_again(), static_cast<int64_t>(kReply.size()));
    EXPECT_EQ(fast.pending_tokens({f, 0}), 0);  // the author has nothing left to process
    EXPECT_EQ(fast.context_memory(f).private_bytes, 0);
    prefill(plain, {p, 0});  // the plain form: the author processes its reply as context
    prefill(fast, {f, 1});
    prefill(plain, {p, 1});
    const ContextRows a = fast.export_context(f, {}), b = plain.export_context(p, {});
    ASSERT_TRUE(a.shared && b.shared);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.authors, b.authors);
    EXPECT_EQ(a.shared->writers, b.shared->writers);
    double worst = 0;
    for (size_t l = 0; l < a.shared->k.size(); ++l) {
      worst = std::max({worst, rows_error(a.shared->k[l], b.shared->k[l]), rows_error(a.shared->v[l], b.shared->v[l])});
    }
    ASSERT_EQ(a.shared->residuals.size(), b.shared->residuals.size());
    for (size_t s = 0; s < a.shared->residuals.size(); ++s) {
      const SequenceRows::Residual &x = a.shared->residuals[s], &y = b.shared->residuals[s];
      EXPECT_TRUE(x.key == y.key);
      EXPECT_EQ(x.writers, y.writers);
      for (size_t l = 0; l < x.c.size(); ++l) {
        if (x.c[l].defined() || y.c[l].defined()) worst = std::max(worst, rows_error(x.c[l], y.c[l]));
      }
    }
    // float32 rows of one computation over other batchings (decode steps against a chunk).
    EXPECT_LT(worst, kTolerance);
    std::printf("  %-15s %-10s adopted rows against the plain form's: %.3g\n", sharing_mode_name(mode),
                base_reader ? "base model" : "adapter", worst);
    const std::vector<at::Tensor> x = next_logits(fast, f), y = next_logits(plain, p);
    for (size_t r = 0; r < x.size(); ++r) EXPECT_LT(lorakv::testing::relative_error(x[r], y[r]), kTolerance) << "reader " << r;
  }
}

// In base_shared each reader keeps its own C_i: after the adoption the other reader still
// builds its C_i of the reply (its rows are not the author's to write); in base_lr_shared
// the two share one A, so the adopted C is theirs too.
TEST_F(EngineAuthorRows, InBaseSharedTheOtherReadersStillBuildTheirOwnResiduals) {
  for (SharingMode mode : {SharingMode::kBaseShared, SharingMode::kBaseLrShared}) {
    Engine engine(*tiny_.model, engine_options(true));
    const ContextId c = prepared(engine, mode);
    reply(engine, c, 0);
    engine.commit_private({c, 0});
    EXPECT_EQ(engine.adopted_commits(), 1) << sharing_mode_name(mode);
    const int64_t expected = mode == SharingMode::kBaseShared ? static_cast<int64_t>(kReply.size()) : 0;
    EXPECT_EQ(engine.pending_tokens({c, 1}), expected) << sharing_mode_name(mode);
  }
}

// Each fallback processes the reply again, releases the author rows, and leaves the context
// as the plain form does: text appended meanwhile (the rows no longer continue the
// context), two agents replying at once (the second commit comes after the first's rows),
// and a reply dropped (as a session drops an agent's instruction and reply and appends the
// turn as text in its name).
TEST_F(EngineAuthorRows, EachFallbackProcessesTheReplyAgainAsThePlainFormDoes) {
  enum class Case { kAppendedMeanwhile, kTwoRepliesAtOnce, kDroppedAndAppended };
  for (SharingMode mode : {SharingMode::kBaseShared, SharingMode::kBaseLrShared}) {
    for (Case k : {Case::kAppendedMeanwhile, Case::kTwoRepliesAtOnce, Case::kDroppedAndAppended}) {
      SCOPED_TRACE(std::string(sharing_mode_name(mode)) + " case " + std::to_string(static_cast<int>(k)));
      std::vector<std::vector<at::Tensor>> logits;
      for (bool keep : {true, false}) {
        Engine engine(*tiny_.model, engine_options(keep));
        const ContextId c = prepared(engine, mode);
        reply(engine, c, 0);
        if (k == Case::kAppendedMeanwhile) engine.append(c, {9, 12});
        if (k == Case::kTwoRepliesAtOnce) reply(engine, c, 1);
        if (k == Case::kDroppedAndAppended) {
          engine.drop_private({c, 0});
          engine.append(c, kReply, 0);
        } else {
          engine.commit_private({c, 0});
        }
        if (k == Case::kTwoRepliesAtOnce) engine.commit_private({c, 1});
        EXPECT_EQ(engine.context_memory(c).private_bytes, 0);
        if (keep) {
          EXPECT_EQ(engine.adopted_commits(), k == Case::kTwoRepliesAtOnce ? 1 : 0);  // the first of the two is adopted
          EXPECT_EQ(engine.committed_tokens_processed_again(), k == Case::kDroppedAndAppended ? 0 : static_cast<int64_t>(kReply.size()));
        }
        logits.push_back(next_logits(engine, c));
      }
      for (size_t r = 0; r < 2; ++r) {
        EXPECT_LT(lorakv::testing::relative_error(logits[0][r], logits[1][r]), kTolerance) << "reader " << r;
      }
    }
  }
}

// An aLoRA reader's context rows are the base model's and its private rows its adapter's:
// it keeps no author rows and its reply is processed again (by the base model).
TEST_F(EngineAuthorRows, AnActivatedLoraReaderKeepsNoAuthorRows) {
  const AdapterPtr alora = std::make_shared<const adapters::Adapter>(
      "planner.alora", "alora.gguf", adapters::AdapterFormat::kGgufLora, planner_->base_shape(), planner_->modules(),
      Tokens{kReply[0], kReply[1]});
  for (SharingMode mode : {SharingMode::kBaseShared, SharingMode::kBaseLrShared}) {
    std::vector<int64_t> private_bytes;
    for (bool keep : {true, false}) {
      Engine engine(*tiny_.model, engine_options(keep));
      const ContextId c = engine.create_context({mode, SharedWriter::kAuthor}, {alora, actor_});
      engine.append(c, text(40));
      prefill(engine, {c, 0});
      reply(engine, c, 0);
      private_bytes.push_back(engine.context_memory(c).private_bytes);
      engine.commit_private({c, 0});
      EXPECT_EQ(engine.adopted_commits(), 0) << sharing_mode_name(mode);
      EXPECT_EQ(engine.pending_tokens({c, 0}), static_cast<int64_t>(kReply.size())) << sharing_mode_name(mode);
    }
    EXPECT_EQ(private_bytes[0], private_bytes[1]) << sharing_mode_name(mode);
  }
}

}  // namespace
}  // namespace lorakv::runtime

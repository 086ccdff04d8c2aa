// tests/runtime/engine_author_test.cpp: writer `author` on the tiny model
// (tests/runtime/tiny_engine_model.h). An agent's committed reply is written from its own
// hidden states: after the commit it reads its reply as it read it while replying (with
// writers `first` and `base` it does not: the test tells them apart). A turn appended in an
// agent's name is written like its reply. An author that leaves before its turn is written,
// or cancels its reply, leaves a context the others go on with. Bad authors are refused.
// (The engine against the reference in every mode: engine_test.cpp,
// EachModeAndWriterMatchesItsReference.)
#include <gtest/gtest.h>

#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "tests/runtime/tiny_engine_model.h"
#include "tests/support/reference_values.h"

namespace lorakv::runtime {
namespace {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;
constexpr double kTolerance = lorakv::testing::kFloat32LogitsTolerance;

std::vector<int32_t> text(int32_t n, int32_t seed = 3) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back((seed + i * 5) % 48);
  return t;
}

const std::vector<int32_t> kReply = {7, 19, 31, 2, 44, 13, 8, 25, 40, 11};
const std::vector<int32_t> kNext = {5, 17};

StepWork private_work(ContextId c, int32_t reader, std::vector<int32_t> tokens) {
  return StepWork::private_tokens({c, reader}, std::move(tokens), true);
}

class EngineAuthor : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = lorakv::testing::make_tiny_engine_model();
    // One A for both (base_lr_shared needs it), different B: the agents read rows differently.
    planner_ = lorakv::testing::make_tiny_adapter(*tiny_.model, "planner", 1, 11);
    actor_ = lorakv::testing::make_tiny_adapter(*tiny_.model, "actor", 1, 22);
  }
  static EngineOptions small_chunks() {
    EngineOptions eo;
    eo.prefill_chunk = 7;  // chunks that cross blocks and turn boundaries
    return eo;
  }

  // The planner's logits for kNext after its reply: in one private run (it reads its reply
  // as its own private rows), or after committing the reply (or, with `as_text`, appending
  // it in the planner's name) and the actor processing the context first.
  at::Tensor next_logits(ContextOptions o, bool committed, bool as_text = false) {
    Engine engine(*tiny_.model, small_chunks());
    const ContextId c = engine.create_context(o, {planner_, actor_});
    engine.append(c, text(40));
    prefill(engine, {c, 0});
    if (!committed) {
      std::vector<int32_t> all = kReply;
      all.insert(all.end(), kNext.begin(), kNext.end());
      const at::Tensor logits = engine.step({private_work(c, 0, all)}).outputs[0].logits;
      return logits.narrow(0, logits.size(0) - 2, 2);
    }
    if (as_text) {
      engine.append(c, kReply, 0);
    } else {
      engine.step({private_work(c, 0, kReply)});
      engine.commit_private({c, 0});
    }
    prefill(engine, {c, 1});  // the actor goes first: with writer first it would write the reply
    prefill(engine, {c, 0});
    return engine.step({private_work(c, 0, kNext)}).outputs[0].logits;
  }

  lorakv::testing::TinyEngineModel tiny_;
  AdapterPtr planner_, actor_;
};

TEST_F(EngineAuthor, AnAgentReadsItsCommittedReplyAsItReadItWhileReplying) {
  for (SharingMode mode : {SharingMode::kBaseShared, SharingMode::kBaseLrShared, SharingMode::kFullShared}) {
    const at::Tensor replying = next_logits({mode, SharedWriter::kAuthor}, false);
    const double d = lorakv::testing::relative_error(next_logits({mode, SharedWriter::kAuthor}, true), replying);
    EXPECT_LT(d, kTolerance) << sharing_mode_name(mode);
    // The same reply appended as text in the planner's name is its turn too.
    const double as_text = lorakv::testing::relative_error(next_logits({mode, SharedWriter::kAuthor}, true, true), replying);
    EXPECT_LT(as_text, kTolerance) << sharing_mode_name(mode);
    std::printf("  %-15s writer author: committed %.3g, appended in its name %.3g\n", sharing_mode_name(mode), d, as_text);
  }
  // The check can fail: where another writer writes the reply (the actor with writer first,
  // the base model with writer base), the planner reads another reply.
  for (SharedWriter other : {SharedWriter::kFirst, SharedWriter::kBase}) {
    for (SharingMode mode : {SharingMode::kBaseShared, SharingMode::kBaseLrShared}) {
      const double d = lorakv::testing::relative_error(next_logits({mode, other}, true), next_logits({mode, other}, false));
      EXPECT_GT(d, 100 * kTolerance) << sharing_mode_name(mode) << " writer " << shared_writer_name(other);
    }
  }
}

// Text appended without an author is the base model's: under writer author the actor then
// reads the reply as under writer base.
TEST_F(EngineAuthor, AReplyAppendedAsTextIsWrittenByTheBaseModel) {
  auto actor_logits = [&](SharedWriter writer, std::optional<int32_t> author) {
    Engine engine(*tiny_.model, small_chunks());
    const ContextId c = engine.create_context({SharingMode::kBaseLrShared, writer}, {planner_, actor_});
    engine.append(c, text(40));
    engine.append(c, kReply, author);
    prefill(engine, {c, 1});
    return engine.step({private_work(c, 1, kNext)}).outputs[0].logits;
  };
  const at::Tensor base = actor_logits(SharedWriter::kBase, std::nullopt);
  EXPECT_LT(lorakv::testing::relative_error(actor_logits(SharedWriter::kAuthor, std::nullopt), base), kTolerance);
  EXPECT_GT(lorakv::testing::relative_error(actor_logits(SharedWriter::kAuthor, 0), base), 100 * kTolerance);
}

// The author leaves after committing, before anyone processed its reply: the base model
// writes it (no reader of its adapter is left), and the actor goes on as if the reply had
// been appended as text.
TEST_F(EngineAuthor, AnAuthorThatLeavesBeforeItsTurnIsWrittenLeavesItToTheBaseModel) {
  for (SharingMode mode : {SharingMode::kBaseShared, SharingMode::kBaseLrShared, SharingMode::kFullShared}) {
    auto actor_logits = [&](bool author_leaves) {
      Engine engine(*tiny_.model, small_chunks());
      const ContextId c = engine.create_context({mode, SharedWriter::kAuthor}, {planner_, actor_});
      engine.append(c, text(40));
      prefill(engine, {c, 0});
      if (author_leaves) {
        engine.step({private_work(c, 0, kReply)});
        engine.append(c, {9});  // the reply is not adopted: processed after the commit
        engine.commit_private({c, 0});
        engine.remove_reader({c, 0});
      } else {
        engine.append(c, {9});
        engine.append(c, kReply);
      }
      prefill(engine, {c, 1});
      EXPECT_EQ(engine.pending_tokens({c, 1}), 0);
      return engine.step({private_work(c, 1, kNext)}).outputs[0].logits;
    };
    EXPECT_LT(lorakv::testing::relative_error(actor_logits(true), actor_logits(false)), kTolerance) << sharing_mode_name(mode);
  }
}

// A reply cancelled (its private rows dropped) or whose author leaves mid-reply appends
// nothing: the actor sees the context as it was.
TEST_F(EngineAuthor, ACancelledReplyOrAnAuthorLeavingMidReplyAppendsNothing) {
  for (bool leave : {false, true}) {
    Engine engine(*tiny_.model, small_chunks());
    const ContextId c = engine.create_context({SharingMode::kBaseLrShared, SharedWriter::kAuthor}, {planner_, actor_});
    engine.append(c, text(40));
    prefill(engine, {c, 0});
    engine.step({private_work(c, 0, kReply)});
    if (leave) {
      engine.remove_reader({c, 0});
    } else {
      engine.drop_private({c, 0});
    }
    EXPECT_EQ(engine.context_tokens(c), text(40));
    EXPECT_EQ(engine.context_memory(c).private_bytes, 0) << "its private and author rows go";
    prefill(engine, {c, 1});
    const at::Tensor ours = engine.step({private_work(c, 1, kNext)}).outputs[0].logits;
    Engine alone(*tiny_.model, small_chunks());
    const ContextId a = alone.create_context({SharingMode::kBaseLrShared, SharedWriter::kAuthor}, {planner_, actor_});
    alone.append(a, text(40));
    prefill(alone, {a, 0});
    prefill(alone, {a, 1});
    EXPECT_LT(lorakv::testing::relative_error(ours, alone.step({private_work(a, 1, kNext)}).outputs[0].logits), kTolerance)
        << (leave ? "the author left" : "cancelled");
  }
}

TEST_F(EngineAuthor, AnAuthorMustBeAReaderOfTheContext) {
  Engine engine(*tiny_.model);
  const ContextId c = engine.create_context({SharingMode::kBaseShared, SharedWriter::kAuthor}, {planner_, actor_});
  EXPECT_THROW(engine.append(c, {1, 2}, 2), ConfigError);
  EXPECT_THROW(engine.append(c, {1, 2}, -1), ConfigError);
  engine.remove_reader({c, 1});
  EXPECT_THROW(engine.append(c, {1, 2}, 1), ConfigError);
  EXPECT_TRUE(engine.context_tokens(c).empty()) << "a refused append changes nothing";
  engine.append(c, {1, 2}, 0);
  EXPECT_EQ(engine.context_tokens(c).size(), 2u);
}

// Saved and restored, a context keeps its authors: the actor processes a reply the planner
// committed before the save as the planner wrote it.
TEST_F(EngineAuthor, ExportAndImportKeepTheAuthors) {
  Engine engine(*tiny_.model, small_chunks());
  const ContextId c = engine.create_context({SharingMode::kBaseLrShared, SharedWriter::kAuthor}, {planner_, actor_});
  engine.append(c, text(40));
  prefill(engine, {c, 0});
  engine.step({private_work(c, 0, kReply)});
  engine.commit_private({c, 0});
  const ContextRows rows = engine.export_context(c, {0, 1});
  ASSERT_EQ(rows.authors.size(), rows.tokens.size());
  EXPECT_EQ(rows.authors.front(), AdapterIdentity::base_model());
  EXPECT_EQ(rows.authors.back(), planner_->identity());
  Engine restored(*tiny_.model, small_chunks());
  const ContextId r = restored.import_context(rows, {planner_, actor_});
  prefill(engine, {c, 1});
  prefill(restored, {r, 1});
  EXPECT_LT(lorakv::testing::relative_error(restored.step({private_work(r, 1, kNext)}).outputs[0].logits,
                                            engine.step({private_work(c, 1, kNext)}).outputs[0].logits),
            kTolerance);
  ContextRows wrong = rows;
  wrong.authors.pop_back();
  EXPECT_THROW(restored.import_context(wrong, {planner_, actor_}), ConfigError);
}

}  // namespace
}  // namespace lorakv::runtime

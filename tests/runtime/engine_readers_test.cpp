// tests/runtime/engine_readers_test.cpp: readers leave (Engine::remove_reader) on the tiny
// model (tests/runtime/tiny_engine_model.h): their rows, residual streams and adapter pins go
// and the bytes (and the context's footprint) drop by exactly theirs; the readers that stay
// see the same logits as if the one that left had never joined; a reader that left cannot be
// used.
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

std::vector<int32_t> text(int32_t n) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back((3 + i * 5) % 48);
  return t;
}

StepWork private_work(ContextId c, int32_t reader, std::vector<int32_t> tokens) {
  return StepWork::private_tokens({c, reader}, std::move(tokens));
}

TEST(EngineReaders, ALeavingReaderTakesItsRowsAndStreamsAlong) {
  lorakv::testing::TinyEngineModel tiny = lorakv::testing::make_tiny_engine_model();
  const AdapterPtr stay = lorakv::testing::make_tiny_adapter(*tiny.model, "stay", 1, 11);
  const AdapterPtr leave_other_a = lorakv::testing::make_tiny_adapter(*tiny.model, "leave", 2, 22);
  const AdapterPtr leave_same_a = lorakv::testing::make_tiny_adapter(*tiny.model, "leave_same_a", 1, 33);
  for (SharingMode mode : {SharingMode::kFull, SharingMode::kBaseShared, SharingMode::kBaseLrShared}) {
    const AdapterPtr leaver = mode == SharingMode::kBaseLrShared ? leave_same_a : leave_other_a;
    // With the leaver: both process the context, both reply; then it leaves.
    Engine engine(*tiny.model);
    const ContextId c = engine.create_context({mode, SharedWriter::kFirst}, {stay});
    engine.append(c, text(40));
    prefill(engine, {c, 0});
    const cache::CacheStats alone_bytes = engine.cache().stats();
    const int32_t joined = engine.add_reader(c, leaver);
    prefill(engine, {c, joined});
    engine.step({private_work(c, 0, {1, 2}), private_work(c, joined, {3, 4, 5})});
    const cache::CacheStats with_leaver = engine.cache().stats();
    EXPECT_GT(with_leaver.bytes_in_use, alone_bytes.bytes_in_use) << sharing_mode_name(mode);
    const int64_t adapter_bytes = engine.memory().adapter_bytes;
    const long pins = leaver.use_count();
    engine.remove_reader({c, joined});
    EXPECT_TRUE(engine.has_left({c, joined}));
    EXPECT_LT(leaver.use_count(), pins) << "the engine still pins the adapter";
    EXPECT_EQ(engine.memory().adapter_bytes, adapter_bytes - leaver->num_bytes()) << sharing_mode_name(mode);
    const cache::CacheStats after = engine.cache().stats();
    // In base_lr_shared the leaver shares its group's stream with the reader that stays: it
    // stays too. Elsewhere every byte of the leaver's goes.
    EXPECT_EQ(after.residual_bytes.count(leaver->identity()), 0u) << sharing_mode_name(mode);
    EXPECT_THROW(engine.step({private_work(c, joined, {6})}), ConfigError);
    EXPECT_THROW(engine.remove_reader({c, joined}), ConfigError);

    // Without it: the same for the reader that stays.
    Engine never(*tiny.model);
    const ContextId c2 = never.create_context({mode, SharedWriter::kFirst}, {stay});
    never.append(c2, text(40));
    prefill(never, {c2, 0});
    never.step({private_work(c2, 0, {1, 2})});
    EXPECT_EQ(after.bytes_in_use, never.cache().stats().bytes_in_use)
        << sharing_mode_name(mode) << ": the bytes are those of an engine the leaver never joined";
    const ContextFootprint left = engine.context_footprint(c), alone = never.context_footprint(c2);
    EXPECT_EQ(left.base_row_sets, alone.base_row_sets) << sharing_mode_name(mode);
    EXPECT_EQ(left.residual_streams_by_rank, alone.residual_streams_by_rank) << sharing_mode_name(mode);
    const StepResult r = engine.step({private_work(c, 0, {7, 8})});
    const StepResult r2 = never.step({private_work(c2, 0, {7, 8})});
    EXPECT_LT(lorakv::testing::relative_error(r.outputs[0].logits, r2.outputs[0].logits),
              lorakv::testing::kFloat32LogitsTolerance)
        << sharing_mode_name(mode);
  }
}

}  // namespace
}  // namespace lorakv::runtime

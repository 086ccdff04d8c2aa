// tests/runtime/generator_eviction_test.cpp: runtime::generate with an eviction policy, on
// the tiny engine model. A reply is private rows, which no policy evicts; the generator
// commits it into the context as it goes, so a reply ten times the budget keeps the cache
// within the budget (and a few blocks) while without a policy it holds every token; a
// budget that never binds changes nothing in the reply.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "lorakv/runtime/generator.h"
#include "tests/runtime/tiny_engine_model.h"

namespace lorakv::runtime {
namespace {

constexpr int64_t kPrompt = 20, kReply = 400, kBudget = 40, kBlock = 16;

GenerationRequest request() {
  std::mt19937 rng(3);
  GenerationRequest r;
  for (int64_t i = 0; i < kPrompt; ++i) r.prompt.push_back(static_cast<int32_t>(rng() % 48));
  r.max_tokens = kReply;
  r.sampling.temperature = 1.0;  // sampled (seeded): a greedy tiny model soon repeats itself
  r.sampling.seed = 7;
  return r;
}

GeneratorOptions with_policy(const char* policy, int64_t budget, EngineMemory* memory) {
  GeneratorOptions o;
  o.memory = memory;
  o.eviction.policy = policy;
  o.eviction.budget_tokens = budget;
  o.eviction.sinks = 4;
  o.eviction.window = 8;
  return o;
}

class GeneratorEviction : public ::testing::Test {
 protected:
  void SetUp() override { tiny_ = lorakv::testing::make_tiny_engine_model(); }
  const LlamaModel& model() const { return *tiny_.model; }
  lorakv::testing::TinyEngineModel tiny_;
};

TEST_F(GeneratorEviction, ABudgetHoldsThroughAReplyTenTimesItsSize) {
  const int64_t row_bytes = Engine::base_row_bytes(model());
  EngineMemory plain_memory;
  GeneratorOptions plain;
  plain.memory = &plain_memory;
  const std::vector<GenerationOutput> full = generate(model(), nullptr, {request()}, nullptr, plain);
  ASSERT_EQ(static_cast<int64_t>(full[0].tokens.size()), kReply);
  EXPECT_GE(plain_memory.cache.peak_bytes_in_use, row_bytes * (kPrompt + kReply));

  for (const char* policy : {"streaming_llm", "h2o"}) {
    EngineMemory memory;
    const std::vector<GenerationOutput> out =
        generate(model(), nullptr, {request()}, nullptr, with_policy(policy, kBudget, &memory));
    ASSERT_EQ(static_cast<int64_t>(out[0].tokens.size()), kReply) << policy;
    // The budget, the commit not yet evicted and the reply's private rows (one commit's
    // worth each), the blocks masked rows pin until packed (a quarter), whole blocks.
    const int64_t bound_rows = (kBudget * 4 / 3 + 2 * GeneratorOptions{}.commit_every + 3 * kBlock);
    EXPECT_LE(memory.cache.peak_bytes_in_use, row_bytes * bound_rows) << policy;
    EXPECT_LE(memory.cache.bytes_in_use, row_bytes * bound_rows) << policy;
  }
}

// lorakv generate --kv-dtype int8 --rerotate --policy streaming_llm: on a model of 64
// positions a 420-token request runs to its end (6.5x the context) within the budget's
// int8 rows.
TEST_F(GeneratorEviction, Int8RowsAndRerotatedKeysGeneratePastTheContext) {
  const lorakv::testing::TinyEngineModel small = lorakv::testing::make_tiny_engine_model(/*context_length=*/64);
  EngineMemory memory;
  GeneratorOptions o = with_policy("streaming_llm", 24, &memory);
  o.kv_dtype = cache::StorageDtype::kInt8;
  o.rerotate = true;
  const std::vector<GenerationOutput> out = generate(*small.model, nullptr, {request()}, nullptr, o);
  ASSERT_EQ(static_cast<int64_t>(out[0].tokens.size()), kReply);
  EngineOptions eo;
  eo.kv_dtype = cache::StorageDtype::kInt8;
  const int64_t row_bytes = Engine::base_row_bytes(*small.model, eo);
  EXPECT_LT(row_bytes, Engine::base_row_bytes(*small.model) / 3) << "int8 rows: a quarter of float32's and a scale";
  const int64_t bound_rows = (24 * 4 / 3 + 2 * GeneratorOptions{}.commit_every + 3 * kBlock);
  EXPECT_LE(memory.cache.peak_bytes_in_use, row_bytes * bound_rows);
  // K blocks of 16 rows, each 32 int8 values and a float32 scale (float32 rows would be 128 bytes).
  EXPECT_GT(memory.cache.base_k_bytes, 0);
  EXPECT_EQ(memory.cache.base_k_bytes % (16 * (32 + 4)), 0);
}

TEST_F(GeneratorEviction, ABudgetThatNeverBindsLeavesTheReplyAsItWas) {
  const std::vector<GenerationOutput> plain = generate(model(), nullptr, {request()}, nullptr, {});
  EngineMemory memory;
  const std::vector<GenerationOutput> roomy =
      generate(model(), nullptr, {request()}, nullptr, with_policy("streaming_llm", kPrompt + kReply, &memory));
  EXPECT_EQ(roomy[0].tokens, plain[0].tokens);
}

TEST_F(GeneratorEviction, BadKeysAreConfigErrors) {
  GeneratorOptions o = with_policy("h2o", 0, nullptr);  // a policy needs a budget
  EXPECT_THROW(generate(model(), nullptr, {request()}, nullptr, o), ConfigError);
  o = with_policy("h2o", kBudget, nullptr);
  o.commit_every = 0;
  EXPECT_THROW(generate(model(), nullptr, {request()}, nullptr, o), ConfigError);
}

}  // namespace
}  // namespace lorakv::runtime

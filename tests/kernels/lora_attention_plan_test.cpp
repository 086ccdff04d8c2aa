// tests/kernels/lora_attention_plan_test.cpp: the work plan kept between calls
// (kernels::LoraAttentionPlan). Calls of one shape (an engine step's layers) run the plan the
// first made, with other rows, queries and residuals, and match the reference; a call of
// another shape (more rows, another rank, other threads) plans afresh and matches too.
#include <gtest/gtest.h>

#include "lorakv/kernels/lora_attention.h"
#include "tests/kernels/lora_attention_case.h"

namespace lorakv::testing {
namespace {

CaseSpec step_spec(uint64_t seed) {
  CaseSpec s;
  s.seed = seed;
  s.heads = 9;
  s.kv_heads = 3;
  s.context = 700;
  for (int i = 0; i < 4; ++i) {
    AgentSpec a;
    a.v_rank = 8;
    a.private_rows = 3;
    a.shares_a_with = i == 0 ? -1 : 0;
    s.agents.push_back(a);
  }
  return s;
}

TEST(LoraAttentionPlan, LayersOfOneShapeRunThePlanOfTheFirst) {
  for (int64_t threads : {1, 2}) {
    kernels::LoraAttentionPlan plan;
    // Three "layers": the same shape, other values each.
    for (uint64_t layer = 0; layer < 3; ++layer) {
      LoraAttentionCase c(step_spec(300 + layer));
      kernels::LoraAttentionStats stats;
      c.run(std::nullopt, threads, &stats, &plan);
      EXPECT_EQ(stats.plan_reused, layer > 0) << "layer " << layer;
      EXPECT_EQ(compare_with_reference(c, tolerance_for(c.spec())), "") << "layer " << layer << ", " << threads << " threads";
    }
    EXPECT_EQ(plan.plans_built(), 1);
    EXPECT_EQ(plan.plans_reused(), 2);
  }
}

TEST(LoraAttentionPlan, AnotherShapePlansAfresh) {
  kernels::LoraAttentionPlan plan;
  LoraAttentionCase first(step_spec(310));
  first.run(std::nullopt, 2, nullptr, &plan);
  CaseSpec longer = step_spec(311);  // more shared rows: other key ranges
  longer.context = 1500;
  CaseSpec ranked = step_spec(312);  // another rank: other record layout
  for (AgentSpec& a : ranked.agents) a.v_rank = 16;
  CaseSpec more_private = step_spec(313);  // one agent with more private rows
  more_private.agents[2].private_rows = 40;
  for (const CaseSpec& s : {longer, ranked, more_private}) {
    LoraAttentionCase c(s);
    kernels::LoraAttentionStats stats;
    c.run(std::nullopt, 2, &stats, &plan);
    EXPECT_FALSE(stats.plan_reused) << s.describe();
    EXPECT_EQ(compare_with_reference(c, tolerance_for(s)), "") << s.describe();
  }
  // Other threads: other work items.
  LoraAttentionCase again(step_spec(314));
  kernels::LoraAttentionStats stats;
  again.run(std::nullopt, 1, &stats, &plan);
  EXPECT_FALSE(stats.plan_reused);
  EXPECT_EQ(compare_with_reference(again, tolerance_for(again.spec())), "");
  EXPECT_EQ(plan.plans_built(), 5);
}

}  // namespace
}  // namespace lorakv::testing

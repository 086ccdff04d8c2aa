// tests/kernels/lora_attention_stats_test.cpp: the op's byte counters. The base counter adds a
// tile's bytes each time the kernel loads that tile (load_tile returns them), so it counts
// tile loads, not measured memory traffic: eight agents on one base make the same loads as
// one (each base tile is loaded once for all of them), whatever the threads and key splits,
// and the loads cover exactly the bytes of the rows; residual bytes grow with the agents; the
// attention-mass second pass is counted apart.
#include <gtest/gtest.h>

#include "lorakv/kernels/lora_attention.h"
#include "tests/kernels/lora_attention_case.h"

namespace lorakv::testing {
namespace {

using kernels::ElementType;

CaseSpec decode_spec(int64_t agents, ElementType storage) {
  CaseSpec s;
  s.seed = 200;
  s.heads = 9;
  s.kv_heads = 3;
  s.context = 1000;
  s.storage = storage;
  for (int64_t i = 0; i < agents; ++i) {
    AgentSpec a;
    a.v_rank = 8;
    s.agents.push_back(a);
  }
  return s;
}

TEST(LoraAttentionStats, EightAgentsLoadEachBaseTileOnceAsOneAgentDoes) {
  for (ElementType storage : {ElementType::kFloat32, ElementType::kBFloat16, ElementType::kInt8}) {
    const int64_t elem = kernels::element_bytes(storage);
    // Per KV head, per row: its key and value (head_dim each, int8 with a float32 scale
    // each) and its int32 position. int8 reads a quarter of float32's row bytes.
    const int64_t scale = storage == ElementType::kInt8 ? 4 : 0;
    const int64_t rows_bytes = 3 * 1000 * (2 * (64 * elem + scale) + 4);
    for (int64_t threads : {1, 2}) {
      kernels::LoraAttentionStats one, eight;
      LoraAttentionCase c1(decode_spec(1, storage)), c8(decode_spec(8, storage));
      c1.run(std::nullopt, threads, &one);
      c8.run(std::nullopt, threads, &eight);
      EXPECT_EQ(one.base_bytes_read, rows_bytes) << threads << " threads";
      EXPECT_EQ(eight.base_bytes_read, one.base_bytes_read) << threads << " threads";
      // C_v: rank 8 per row per KV head for each agent (float32 beside an int8 base).
      EXPECT_EQ(one.residual_bytes_read, 3 * 1000 * 8 * (storage == ElementType::kInt8 ? 4 : elem));
      EXPECT_EQ(eight.residual_bytes_read, 8 * one.residual_bytes_read);
      EXPECT_EQ(eight.mass_bytes_read, 0);
      EXPECT_EQ(compare_with_reference(c8, tolerance_for(c8.spec())), "");
    }
  }
}

// Eight agents of a shared-A group (base_lr_shared) read one C: each C tile is loaded once for
// all of them, as for one agent; eight agents on C streams of their own in one pool (as
// cache/ keeps base_shared's) load eight.
TEST(LoraAttentionStats, AgentsOfASharedAGroupLoadTheirCOnce) {
  for (int64_t threads : {1, 2}) {
    CaseSpec shared = decode_spec(8, ElementType::kFloat32);
    for (size_t i = 1; i < shared.agents.size(); ++i) shared.agents[i].shares_a_with = 0;
    CaseSpec own = decode_spec(8, ElementType::kFloat32);
    own.residuals_in_one_pool = true;
    kernels::LoraAttentionStats one, group, separate;
    LoraAttentionCase c1(decode_spec(1, ElementType::kFloat32)), cs(shared), co(own);
    c1.run(std::nullopt, threads, &one);
    cs.run(std::nullopt, threads, &group);
    co.run(std::nullopt, threads, &separate);
    EXPECT_EQ(group.residual_bytes_read, one.residual_bytes_read) << threads << " threads";
    EXPECT_EQ(separate.residual_bytes_read, 8 * one.residual_bytes_read) << threads << " threads";
    EXPECT_EQ(compare_with_reference(cs, tolerance_for(shared)), "");
    EXPECT_EQ(compare_with_reference(co, tolerance_for(own)), "");
  }
}

TEST(LoraAttentionStats, MassCountsItsSecondPassApart) {
  CaseSpec s = decode_spec(2, ElementType::kFloat32);
  s.mass = kernels::AttentionMass::kSumOverAgents;
  kernels::LoraAttentionStats decode, window;
  LoraAttentionCase d(s);
  d.run(std::nullopt, 1, &decode);
  EXPECT_EQ(decode.mass_bytes_read, 0) << "decode normalises kept scores; nothing is re-read";
  s.agents[0].num_queries = 4;
  LoraAttentionCase w(s);
  w.run(std::nullopt, 1, &window);
  EXPECT_EQ(window.base_bytes_read, decode.base_bytes_read);
  // The second pass re-reads keys and positions, not values.
  EXPECT_EQ(window.mass_bytes_read, 3 * 1000 * (64 * 4 + 4));
  EXPECT_EQ(compare_with_reference(w, tolerance_for(s)), "");
}

}  // namespace
}  // namespace lorakv::testing

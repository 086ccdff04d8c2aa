// tests/kernels/lora_attention_test.cpp: the fused base + low-rank attention against the
// plain reference (tests/reference/lora_attention_reference.h) on random paged cases: ranks,
// head dims, GQA ratios, lengths that are not multiples of the block or tile, several agents
// with mixed adapters (a shared-A group, one without adapter), shared and per-head residuals,
// K-LoRA, rows out of order and with gaps, keys stored before RoPE and rotated to compact
// positions, the sliding window, prefill chunks over a cache, bfloat16, attention mass and
// lse. Every case runs on every vector path this CPU has, on 1 and 2 threads.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <iostream>

#include "lorakv/kernels/lora_attention.h"
#include "lorakv/kernels/rope.h"
#include "tests/kernels/lora_attention_case.h"
#include "tests/reference/lora_attention_reference.h"

namespace lorakv::testing {
namespace {

using kernels::AttentionMass;
using kernels::ElementType;

void expect_matches_on_every_path(const CaseSpec& spec) {
  LoraAttentionCase c(spec);
  for (const KernelForm& form : runnable_forms()) {
    for (int64_t threads : {1, 2}) {
      kernels::LoraAttentionStats stats;
      c.run(form.path, threads, &stats, nullptr, form.integer_qk);
      EXPECT_EQ(stats.path, form.path);
      EXPECT_EQ(stats.integer_qk, form.integer_qk);
      EXPECT_EQ(compare_with_reference(c, tolerance_for(spec)), "")
          << spec.describe() << "\n  path " << form.name() << ", " << threads << " threads";
    }
  }
}

AgentSpec agent(int64_t queries, int64_t v_rank, int64_t k_rank, int64_t private_rows = 0, int shares_a_with = -1) {
  AgentSpec a;
  a.num_queries = queries;
  a.v_rank = v_rank;
  a.k_rank = k_rank;
  a.private_rows = private_rows;
  a.shares_a_with = shares_a_with;
  return a;
}

TEST(LoraAttentionReference, RopeIsTheKernelsRotateHalf) {
  // The reference rotates with its own code; it must be the layout kernels/rope.h (and
  // Hugging Face) use, or both sides could agree on a wrong rotation.
  const int64_t dim = 64;
  const at::Tensor positions = at::tensor({0, 5, 77, 3}, at::kLong);
  const at::Tensor inv_freq = kernels::rope_inv_freq(dim, 10000.0);
  const at::Tensor angles = at::arange(100, at::kLong).to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);
  const at::Tensor x = at::randn({4, dim});
  const at::Tensor ours = reference::rope_rows(x.to(at::kDouble), positions, angles.cos(), angles.sin());
  auto [cos, sin] = kernels::rope_cos_sin(positions, inv_freq);
  const at::Tensor theirs = kernels::apply_rope(x.unsqueeze(1), cos, sin).squeeze(1);
  EXPECT_TRUE(at::allclose(ours.to(at::kFloat), theirs, 1e-5, 1e-5));
}

TEST(LoraAttention, RanksAndHeadDims) {
  uint64_t seed = 1;
  for (int64_t dim : {64, 128}) {
    for (int64_t rank : {1, 8, 64, 128}) {
      CaseSpec s;
      s.seed = seed++;
      s.dim = dim;
      s.context = 77;  // not a multiple of the block (16) or the tile (64)
      s.agents = {agent(3, rank, rank, 5), agent(1, rank, 0)};
      expect_matches_on_every_path(s);
    }
  }
}

TEST(LoraAttention, GqaRatios) {
  uint64_t seed = 20;
  for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 4}, {6, 2}, {9, 3}, {16, 2}, {32, 4}}) {
    CaseSpec s;
    s.seed = seed++;
    s.heads = heads;
    s.kv_heads = kv_heads;
    s.context = 131;
    s.agents = {agent(2, 8, 8, 3), agent(1, 16, 0)};
    expect_matches_on_every_path(s);
  }
}

TEST(LoraAttention, OneThreeAndEightAgentsWithMixedAdapters) {
  CaseSpec one;
  one.seed = 40;
  one.context = 150;
  one.agents = {agent(1, 8, 0)};
  expect_matches_on_every_path(one);

  // A shared-A pair (agent 1 reads agent 0's C with its own B) and an agent without adapter.
  CaseSpec three = one;
  three.seed = 41;
  three.agents = {agent(2, 8, 4), agent(1, 8, 4, 0, /*shares_a_with=*/0), agent(3, 0, 0, 6)};
  expect_matches_on_every_path(three);

  CaseSpec eight = one;
  eight.seed = 42;
  eight.heads = 9;
  eight.kv_heads = 3;
  eight.agents = {agent(1, 8, 0),         agent(1, 8, 0, 0, 0), agent(2, 64, 8, 4), agent(1, 0, 0),
                  agent(5, 1, 1, 9),      agent(1, 128, 0),     agent(1, 0, 16, 2), agent(3, 8, 8, 0)};
  expect_matches_on_every_path(eight);
}

TEST(LoraAttention, SharedAndPerHeadResiduals) {
  CaseSpec s;
  s.seed = 50;
  s.kv_heads = 4;
  s.heads = 8;
  s.context = 90;
  s.agents = {agent(2, 8, 8, 4), agent(1, 8, 0, 0, 0), agent(1, 0, 0)};
  // Each KV head keeps its own rows (per-head eviction): one lane and one C per head.
  s.heads_per_lane = 1;
  s.evicted = true;
  expect_matches_on_every_path(s);
  // One token set for the layer, a C per KV head inside each residual row.
  s.seed = 51;
  s.heads_per_lane = 0;
  s.evicted = false;
  s.per_head_residual = true;
  expect_matches_on_every_path(s);
  // Two head groups of two KV heads, each group its own rows; residual blocks of another size.
  s.seed = 52;
  s.heads_per_lane = 2;
  s.evicted = true;
  s.per_head_residual = false;
  s.block_size = 7;
  s.residual_block_size = 5;
  expect_matches_on_every_path(s);
}

TEST(LoraAttention, RowsOutOfOrderWithGaps) {
  CaseSpec s;
  s.seed = 60;
  s.context = 200;
  s.evicted = true;
  s.shuffled = true;
  s.agents = {agent(4, 8, 8, 10), agent(1, 0, 0, 3)};
  expect_matches_on_every_path(s);
}

TEST(LoraAttention, KeysStoredBeforeRopeRotatedToCompactPositions) {
  CaseSpec s;
  s.seed = 70;
  s.context = 120;
  s.keys_before_rope = true;
  s.agents = {agent(2, 8, 8, 4), agent(1, 0, 0, 2)};
  expect_matches_on_every_path(s);
  s.seed = 71;
  s.evicted = true;
  s.compact_rope = true;
  expect_matches_on_every_path(s);
  // Post-RoPE base keys with K-LoRA deltas rotated to compact positions.
  s.seed = 72;
  s.keys_before_rope = false;
  expect_matches_on_every_path(s);
}

AgentSpec delta_agent(int64_t queries, int64_t v_rank, int64_t k_rank, int64_t private_rows = 0) {
  AgentSpec a = agent(queries, v_rank, k_rank, private_rows);
  a.k_as_delta = true;
  return a;
}

// Compact positions given per lane as its row index plus a first position (endless streaming),
// not per slot: shared rows from 5, each agent's private rows from after them.
TEST(LoraAttention, KeysRotatedToTheirRowIndexInTheLane) {
  CaseSpec s;
  s.seed = 135;
  s.context = 120;
  s.keys_before_rope = s.compact_rope = s.rope_from_row = s.evicted = true;
  s.agents = {agent(3, 8, 8, 6), agent(1, 0, 0, 4), agent(2, 8, 0)};
  expect_matches_on_every_path(s);
  s.seed = 136;  // int8 rows stored Hadamard-rotated, per-head lanes
  s.storage = ElementType::kInt8;
  s.hadamard = true;
  s.heads_per_lane = 1;
  expect_matches_on_every_path(s);
}

TEST(LoraAttention, StoredFullWidthKeyDeltas) {
  // The alternative to expanding C_k B_k per tile: each agent's deltas stored at full width,
  // added to the base keys (after RoPE), or added and then rotated (keys before RoPE), beside
  // agents on the expansion path and one without a K adapter, with gaps and per-head lanes.
  CaseSpec s;
  s.seed = 75;
  s.context = 150;
  s.agents = {delta_agent(2, 8, 8, 4), agent(1, 8, 8), delta_agent(1, 0, 16), agent(1, 0, 0, 3)};
  expect_matches_on_every_path(s);
  s.seed = 76;
  s.keys_before_rope = true;
  s.evicted = true;
  s.compact_rope = true;
  expect_matches_on_every_path(s);
  s.seed = 77;
  s.keys_before_rope = false;
  s.heads = 6;
  s.kv_heads = 3;
  s.heads_per_lane = 1;
  s.storage = ElementType::kBFloat16;
  expect_matches_on_every_path(s);
}

TEST(LoraAttention, SlidingWindow) {
  CaseSpec s;
  s.seed = 80;
  s.context = 160;
  s.window = 37;
  s.agents = {agent(1, 8, 8), agent(20, 8, 0, 20), agent(3, 0, 0, 0)};
  expect_matches_on_every_path(s);
  s.seed = 81;
  s.evicted = true;
  s.shuffled = true;
  s.random_query_positions = true;  // some queries see nothing: zeros and lse -inf
  expect_matches_on_every_path(s);
}

TEST(LoraAttention, PrefillChunksOverAnExistingCache) {
  // Each agent's chunk: its queries are its newest private rows (causal among themselves)
  // over a shared cache of 300 rows.
  CaseSpec s;
  s.seed = 90;
  s.heads = 9;
  s.kv_heads = 3;
  s.context = 300;
  s.agents = {agent(40, 8, 8, 40), agent(33, 64, 0, 50), agent(17, 0, 0, 17)};
  expect_matches_on_every_path(s);
  s.seed = 91;
  s.random_query_positions = true;
  expect_matches_on_every_path(s);
}

TEST(LoraAttention, PrivateRowsOnlyAndNoRowsAtAll) {
  // `full` mode: no shared rows, each agent only its own; the last agent has no rows at all.
  CaseSpec s;
  s.seed = 100;
  s.context = 0;
  s.agents = {agent(3, 0, 0, 70), agent(1, 8, 0, 40), agent(1, 0, 0, 0)};
  s.random_query_positions = true;
  expect_matches_on_every_path(s);
}

TEST(LoraAttention, SeveralBasesInOneCall) {
  CaseSpec s;
  s.seed = 110;
  s.num_bases = 2;
  s.context = 100;
  s.agents = {agent(2, 8, 8, 3), agent(1, 0, 0), agent(1, 8, 0, 5), agent(3, 16, 16), agent(1, 8, 0, 0, 2)};
  s.agents[2].base = s.agents[3].base = s.agents[4].base = 1;
  s.agents[4].shares_a_with = 2;
  expect_matches_on_every_path(s);
}

TEST(LoraAttention, BFloat16StorageQueriesAndOutputs) {
  CaseSpec s;
  s.seed = 120;
  s.storage = ElementType::kBFloat16;
  s.context = 140;
  s.agents = {agent(3, 8, 8, 6), agent(1, 64, 0), agent(2, 0, 0, 2)};
  expect_matches_on_every_path(s);
  s.seed = 121;
  s.q_dtype = s.out_dtype = ElementType::kBFloat16;
  s.dim = 128;
  s.keys_before_rope = true;
  s.evicted = true;
  s.compact_rope = true;
  expect_matches_on_every_path(s);
}

// int8 base rows (shared and private) with a scale per row and KV head, read on every path;
// residual rows stay float32. The reference gets the values the pool holds (int8 times its
// scale), so the tolerance is float32's: quantisation error is the engine's to measure.
TEST(LoraAttention, Int8BaseRowsWithScalesPerRowAndHead) {
  CaseSpec s;
  s.seed = 125;
  s.storage = ElementType::kInt8;
  s.context = 150;
  s.agents = {agent(3, 8, 8, 6), agent(1, 64, 0), agent(2, 0, 0, 2), agent(1, 8, 0, 0, 0)};
  expect_matches_on_every_path(s);
  s.seed = 126;  // per-head token sets, K-LoRA on keys stored before RoPE, evicted gaps, bfloat16 out
  s.heads_per_lane = 1;
  s.per_head_residual = true;
  s.keys_before_rope = true;
  s.evicted = true;
  s.compact_rope = true;
  s.q_dtype = s.out_dtype = ElementType::kBFloat16;
  expect_matches_on_every_path(s);
  s.seed = 127;  // attention mass and a sliding window over int8 rows
  s.heads_per_lane = 0;
  s.per_head_residual = s.keys_before_rope = s.evicted = s.compact_rope = false;
  s.q_dtype = s.out_dtype = ElementType::kFloat32;
  s.window = 40;
  s.mass = AttentionMass::kPerAgent;
  s.agents = {agent(4, 8, 0, 3), agent(1, 0, 0)};
  expect_matches_on_every_path(s);
}

// The same with rows stored Hadamard-rotated: queries rotated for keys after RoPE, keys
// rotated back on chip where K-LoRA, key deltas or RoPE need them, values once per query.
TEST(LoraAttention, Int8BaseRowsStoredHadamardRotated) {
  CaseSpec s;
  s.seed = 128;
  s.storage = ElementType::kInt8;
  s.hadamard = true;
  s.context = 150;
  s.agents = {agent(3, 8, 8, 6), agent(1, 64, 0), agent(2, 0, 0, 2), agent(1, 8, 8, 0, 0)};
  expect_matches_on_every_path(s);
  s.seed = 129;  // stored key deltas instead of the expansion
  s.agents[3].k_as_delta = true;
  expect_matches_on_every_path(s);
  s.seed = 130;  // keys before RoPE, rotated to compact positions; per-head lanes; dim 128
  s.dim = 128;
  s.heads_per_lane = 1;
  s.keys_before_rope = s.compact_rope = s.evicted = true;
  s.agents[3].k_as_delta = false;
  expect_matches_on_every_path(s);
  s.seed = 131;  // attention mass from a query window
  s.dim = 64;
  s.heads_per_lane = 0;
  s.keys_before_rope = s.compact_rope = s.evicted = false;
  s.mass = AttentionMass::kSumOverAgents;
  s.agents = {agent(4, 8, 8, 3), agent(2, 0, 0)};
  s.agents[0].mass_first_query = 2;
  expect_matches_on_every_path(s);
}

TEST(LoraAttention, AttentionMassDecodeAndQueryWindows) {
  for (AttentionMass mass : {AttentionMass::kPerAgent, AttentionMass::kSumOverAgents}) {
    CaseSpec decode;  // one query each: raw scores kept, normalised with the final lse
    decode.seed = 130 + static_cast<uint64_t>(mass);
    decode.heads = 9;
    decode.kv_heads = 3;
    decode.context = 150;
    decode.evicted = true;
    decode.mass = mass;
    decode.agents = {agent(1, 8, 8, 5), agent(1, 0, 0), agent(1, 8, 0, 0, 0)};
    expect_matches_on_every_path(decode);
    CaseSpec window = decode;  // a window of queries: a second QK pass with the stored lse
    window.seed += 10;
    window.agents = {agent(6, 8, 8, 6), agent(1, 0, 0), agent(4, 8, 0, 0, 0)};
    window.window = 50;
    expect_matches_on_every_path(window);
  }
}

// An observation window (SnapKV): only an agent's last queries add mass, on both mass paths.
TEST(LoraAttention, AttentionMassFromTheLastQueriesOnly) {
  for (AttentionMass mass : {AttentionMass::kPerAgent, AttentionMass::kSumOverAgents}) {
    CaseSpec s;
    s.seed = 160 + static_cast<uint64_t>(mass);
    s.heads = 9;
    s.kv_heads = 3;
    s.context = 120;
    s.mass = mass;
    s.agents = {agent(7, 8, 0, 4), agent(5, 0, 0), agent(1, 8, 0, 0, 0)};
    s.agents[0].mass_first_query = 4;  // the last 3 queries
    s.agents[1].mass_first_query = 5;  // none of them
    s.agents[2].mass_first_query = 0;  // its one query
    expect_matches_on_every_path(s);
    CaseSpec decode = s;  // one query each: the raw-score path
    decode.seed += 10;
    decode.agents = {agent(1, 8, 8, 5), agent(1, 0, 0)};
    decode.agents[1].mass_first_query = 1;
    expect_matches_on_every_path(decode);
  }
}

// The shapes of an engine's shared decode step: the agents of a base go through each tile in
// blocks of query rows across agents and heads (kernels/cpu/lora_attention_impl.h, Block),
// with one C tile for consecutive agents that read the same C rows.
TEST(LoraAttention, AgentsOfATileAsBlocksAcrossAgentsAndHeads) {
  CaseSpec shared_a;  // base_lr_shared: eight agents on one C, each its own B
  shared_a.seed = 160;
  shared_a.heads = 9;
  shared_a.kv_heads = 3;
  shared_a.context = 300;
  shared_a.agents = {agent(1, 8, 0)};
  for (int i = 1; i < 8; ++i) shared_a.agents.push_back(agent(1, 8, 0, 2, /*shares_a_with=*/0));
  expect_matches_on_every_path(shared_a);

  CaseSpec own_c = shared_a;  // base_shared: each agent its own C, in one pool as cache/ keeps them
  own_c.seed = 161;
  own_c.residuals_in_one_pool = true;
  for (AgentSpec& a : own_c.agents) a.shares_a_with = -1;
  expect_matches_on_every_path(own_c);
  own_c.residuals_in_one_pool = false;  // and a pool each
  expect_matches_on_every_path(own_c);

  // More rows than one block, runs broken by an agent with keys of its own (K-LoRA, key
  // deltas), C runs broken by agents without a v residual or on another C, prefill rows.
  CaseSpec mixed = shared_a;
  mixed.seed = 162;
  mixed.agents = {agent(3, 8, 0),           agent(1, 8, 0, 0, 0), agent(1, 0, 0, 4),    agent(1, 8, 0, 0, 0),
                  agent(2, 8, 4, 0),         agent(1, 8, 0, 0, 0), agent(5, 16, 0, 3),   agent(1, 16, 0, 0, 6),
                  agent(1, 8, 0, 0, 0),      agent(1, 8, 0),       agent(4, 8, 0, 2, 0), agent(1, 0, 0)};
  mixed.agents[4].k_as_delta = true;
  mixed.residuals_in_one_pool = true;
  expect_matches_on_every_path(mixed);
}

// Integer QK on an int8 base: every query row of an item is rounded to int16 steps of its
// largest element (wide blocks of 8 agents, an agent with K-LoRA alone, private rows, the
// Hadamard frame), and the reference reads the queries so rounded. The rounding moves a
// score by about 2^-16 of its size, inside float32's tolerance, so that alone cannot show it
// happened: the same path's float form, whose narrow blocks run the very same float code,
// gives other bits for every agent only if each agent's queries were rounded.
TEST(LoraAttention, IntegerQkRoundsTheQueriesOfEveryBlock) {
  std::vector<KernelForm> integer;
  for (const KernelForm& f : runnable_forms()) {
    if (f.integer_qk) integer.push_back(f);
  }
  if (integer.empty()) GTEST_SKIP() << "no path of this CPU has the int16 dot product (VNNI)";
  for (bool hadamard : {false, true}) {
    CaseSpec s;
    s.seed = hadamard ? 171 : 170;
    s.heads = 9;
    s.kv_heads = 3;
    s.context = 140;
    s.storage = ElementType::kInt8;
    s.hadamard = hadamard;
    s.agents = {agent(1, 8, 0, 2), agent(1, 8, 0, 0, 0), agent(1, 8, 0, 0, 0), agent(1, 8, 0, 3, 0),
                agent(1, 8, 4, 0),  agent(2, 8, 0, 0, 0), agent(1, 8, 0, 0, 0), agent(1, 0, 0, 1)};
    LoraAttentionCase c(s);
    for (const KernelForm& form : integer) {
      kernels::LoraAttentionStats stats;
      c.run(form.path, 1, &stats, nullptr, false);
      ASSERT_FALSE(c.queries_rounded());
      ASSERT_EQ(compare_with_reference(c, tolerance_for(s)), "");
      std::vector<at::Tensor> float_form;
      for (size_t a = 0; a < s.agents.size(); ++a) float_form.push_back(c.out(static_cast<int64_t>(a)).clone());
      for (int64_t threads : {1, 2}) {
        c.run(form.path, threads, &stats, nullptr, true);
        ASSERT_TRUE(c.queries_rounded());
        EXPECT_EQ(compare_with_reference(c, tolerance_for(s)), "") << form.name() << ", " << threads << " threads";
        for (size_t a = 0; a < s.agents.size(); ++a) {
          EXPECT_FALSE(at::equal(c.out(static_cast<int64_t>(a)), float_form[a]))
              << "agent " << a << "'s queries were not rounded, " << form.name();
        }
      }
    }
  }
}

// Agents of a shared-A group whose C views are separate lane tables with the same block ids
// (as an engine builds them, one view per agent) read one C tile. (C streams with other
// block ids in the same pool are told apart: AgentsOfATileAsBlocksAcrossAgentsAndHeads.)
TEST(LoraAttention, SharedCRecognisedByItsBlockIds) {
  CaseSpec s;
  s.seed = 163;
  s.heads = 9;
  s.kv_heads = 3;
  s.context = 200;
  s.agents = {agent(1, 8, 0), agent(1, 8, 0, 0, 0), agent(1, 8, 0, 0, 0)};
  LoraAttentionCase c(s);
  kernels::LoraAttentionStats together;
  c.run(std::nullopt, 1, &together);
  ASSERT_EQ(compare_with_reference(c, tolerance_for(s)), "");

  // Agent 1 gets a copy of the lane tables: same ids, other arrays.
  const kernels::LaneRows* lanes = c.agents()[1].v.c_lanes;
  std::vector<std::vector<int32_t>> blocks;
  std::vector<kernels::LaneRows> copy;
  const int64_t num_lanes = 1;  // every KV head in one token set (heads_per_lane unset)
  for (int64_t l = 0; l < num_lanes; ++l) {
    const int64_t n = (lanes[l].num_rows + c.agents()[1].v.c_storage->block_size - 1) / c.agents()[1].v.c_storage->block_size;
    blocks.emplace_back(lanes[l].blocks, lanes[l].blocks + n);
  }
  for (int64_t l = 0; l < num_lanes; ++l) {
    copy.push_back(lanes[l]);
    copy.back().blocks = blocks[static_cast<size_t>(l)].data();
  }
  c.agents()[1].v.c_lanes = copy.data();
  for (cpu::VectorPath path : runnable_paths()) {
    kernels::LoraAttentionStats copied;
    c.run(path, 1, &copied);
    EXPECT_EQ(copied.residual_bytes_read, together.residual_bytes_read) << "the copy's C is loaded again";
    EXPECT_EQ(compare_with_reference(c, tolerance_for(s)), "") << cpu::vector_path_name(path);
  }

}

TEST(LoraAttention, LongContextIsSplitAcrossThreads) {
  CaseSpec s;
  s.seed = 150;
  s.heads = 4;
  s.kv_heads = 1;
  s.context = 2500;
  s.mass = AttentionMass::kPerAgent;
  s.agents = {agent(1, 8, 8, 3), agent(1, 0, 0)};
  LoraAttentionCase c(s);
  kernels::LoraAttentionStats stats;
  const int before = at::get_num_threads();
  at::set_num_threads(2);  // torch's pool may have one thread on a one-core machine
  c.run(std::nullopt, 2, &stats);
  at::set_num_threads(before);
  EXPECT_GT(stats.key_splits, 1) << "one KV head on two threads must be split";
  // Two threads really run: at::parallel_for is serial in code built without OpenMP.
  EXPECT_EQ(stats.threads, 2);
  EXPECT_EQ(compare_with_reference(c, tolerance_for(s)), "") << s.describe();
  expect_matches_on_every_path(s);
}

}  // namespace
}  // namespace lorakv::testing

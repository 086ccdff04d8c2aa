// tests/kernels/lora_attention_errors_test.cpp: bad arguments to the fused attention are
// refused with an InvalidArgumentError naming what disagrees (shapes, ranks above the
// limit, residual rows or positions missing, block ids outside the pool, outputs missing),
// before any output is written; a vector path the CPU cannot run is a ConfigError.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/kernels/lora_attention.h"
#include "tests/kernels/lora_attention_case.h"

namespace lorakv::testing {
namespace {

using kernels::LaneRows;
using kernels::LoraAttentionParams;

CaseSpec valid_spec() {
  CaseSpec s;
  s.seed = 7;
  s.context = 40;
  s.mass = kernels::AttentionMass::kPerAgent;
  AgentSpec a;
  a.num_queries = 2;
  a.v_rank = 8;
  a.k_rank = 8;
  a.private_rows = 3;
  AgentSpec b;
  b.v_rank = 4;
  s.agents = {a, b};
  return s;
}

// Breaks one thing in a valid case (through `edit`), runs the op and returns the
// InvalidArgumentError's message ("" when none was thrown). Outputs must stay unwritten.
std::string refusal(const std::function<void(LoraAttentionCase&, LoraAttentionParams&)>& edit) {
  LoraAttentionCase c(valid_spec());
  c.run(std::nullopt);  // valid as built
  c.out(0).fill_(0);
  at::Tensor out = c.out(0);
  LoraAttentionParams p = c.params();
  edit(c, p);
  std::string message;
  try {
    kernels::lora_attention(p);
  } catch (const InvalidArgumentError& e) {
    message = e.what();
  }
  EXPECT_TRUE(at::equal(c.out(0), out)) << "a refused call wrote outputs";
  return message;
}

// A copy of `n` lanes that the edit can change; kept alive for the call.
std::vector<LaneRows>& editable(const LaneRows* lanes, size_t n) {
  static std::vector<std::vector<LaneRows>> copies;
  return copies.emplace_back(lanes, lanes + n);
}
std::vector<int32_t>& editable_table(const LaneRows& lane, int64_t block_size) {
  static std::vector<std::vector<int32_t>> tables;
  return tables.emplace_back(lane.blocks, lane.blocks + (lane.num_rows + block_size - 1) / block_size);
}

void expect_refusal(const std::function<void(LoraAttentionCase&, LoraAttentionParams&)>& edit,
                    const std::string& names) {
  const std::string message = refusal(edit);
  EXPECT_NE(message.find(names), std::string::npos) << "message: '" << message << "' should name '" << names << "'";
  EXPECT_NE(message.find("lora_attention"), std::string::npos) << message;
}

TEST(LoraAttentionErrors, ShapesThatDisagree) {
  expect_refusal([](auto&, auto& p) { p.num_heads = 5; }, "5 query heads are not a multiple of 2 KV heads");
  expect_refusal([](auto&, auto& p) { p.head_dim = 48; }, "head_dim 48");
  expect_refusal([](auto&, auto& p) { p.window = -1; }, "negative sliding window");
  expect_refusal([](auto& c, auto&) { c.bases()[0].rows.heads_per_lane = 3; }, "3 KV heads per lane do not divide 2");
  expect_refusal([](auto& c, auto&) { c.agents()[1].out_head_stride = 1; }, "agent 1 out: strides");
  expect_refusal([](auto& c, auto&) { c.bases()[0].num_agents = 1; }, "the bases list 1 of the 2 agents");
  expect_refusal([](auto& c, auto&) { c.agents()[0].num_queries = 0; }, "agent 0 has 0 queries");
}

TEST(LoraAttentionErrors, RankAboveTheLimit) {
  expect_refusal([](auto& c, auto&) { c.agents()[0].v.rank = 129; }, "agent 0's v residual has rank 129, outside 0..128");
  expect_refusal([](auto& c, auto&) { c.agents()[1].k.rank = -1; }, "agent 1's k residual has rank -1");
}

TEST(LoraAttentionErrors, ResidualRowsOrPositionsMissing) {
  expect_refusal(
      [](auto& c, auto&) {
        auto& lanes = editable(c.agents()[0].v.c_lanes, 1);
        lanes[0].num_rows -= 1;
        c.agents()[0].v.c_lanes = lanes.data();
      },
      "has 39 residual rows for 40 shared rows");
  expect_refusal([](auto& c, auto&) { c.agents()[0].k.c_lanes = nullptr; }, "agent 0's k residual: residual rows are missing");
  expect_refusal([](auto& c, auto&) { c.agents()[1].v.b = nullptr; }, "agent 1's v residual: B per KV head");
  expect_refusal([](auto& c, auto&) { c.agents()[0].q_positions = nullptr; }, "q_positions missing");
  expect_refusal([](auto& c, auto&) { c.agents()[0].out = nullptr; }, "out missing");
  expect_refusal(
      [](auto& c, auto&) {
        auto* st = const_cast<kernels::PagedStorage*>(c.bases()[0].rows.storage);
        st->positions = nullptr;
      },
      "base 0 shared rows: storage pointers missing");
}

TEST(LoraAttentionErrors, KeyDeltasThatDoNotFit) {
  // Agent 1 has no K adapter; the base pool's layout is a valid delta layout.
  auto delta_on_base = [](LoraAttentionCase& c, int64_t rows_off) {
    const kernels::PagedRows& rows = c.bases()[0].rows;
    auto& lanes = editable(rows.lanes, 1);
    lanes[0].num_rows -= rows_off;
    c.agents()[1].k_delta = {rows.storage, lanes.data()};
  };
  expect_refusal([&](auto& c, auto&) { delta_on_base(c, 1); }, "agent 1's key deltas lane 0 has 39 key delta rows for 40");
  expect_refusal(
      [&](auto& c, auto&) {
        delta_on_base(c, 0);
        c.agents()[1].k_delta.lanes = nullptr;
      },
      "agent 1's key deltas: key delta rows are missing");
  expect_refusal([](auto& c, auto&) { c.agents()[0].k_delta = {c.bases()[0].rows.storage, c.bases()[0].rows.lanes}; },
                 "agent 0's key deltas: a k residual and stored key deltas at once");
}

TEST(LoraAttentionErrors, BlockIdsOutsideThePool) {
  expect_refusal(
      [](auto& c, auto&) {
        const kernels::PagedRows& rows = c.bases()[0].rows;
        auto& lanes = editable(rows.lanes, 1);
        auto& table = editable_table(lanes[0], rows.storage->block_size);
        table[1] = static_cast<int32_t>(rows.storage->num_blocks);
        lanes[0].blocks = table.data();
        c.bases()[0].rows.lanes = lanes.data();
      },
      "block 1 of its table is");
}

TEST(LoraAttentionErrors, RopeTableMissingOrTooShort) {
  // Agent 0 has K-LoRA: its C_k B_k is rotated per row position.
  expect_refusal([](auto&, auto& p) { p.rope_cos = nullptr; }, "K-LoRA rotates C_k B_k by position but no RoPE table");
  expect_refusal([](auto&, auto& p) { p.rope_rows = 10; }, "is outside the table's 10 rows");
}

// The RoPE bound comes from the lanes' metadata (max_rope_position), not from the rows: a
// lane that rotates rows on chip without it is refused, and one whose bound is past the
// table is refused even though no row is read to find out.
TEST(LoraAttentionErrors, RopeBoundIsMetadata) {
  auto edit_lane0 = [](int64_t max_rope_position) {
    return [max_rope_position](LoraAttentionCase& c, LoraAttentionParams&) {
      const kernels::PagedRows& rows = c.bases()[0].rows;
      auto& lanes = editable(rows.lanes, 1);
      lanes[0].max_rope_position = max_rope_position;
      c.bases()[0].rows.lanes = lanes.data();
    };
  };
  expect_refusal(edit_lane0(-1), "rows are rotated on chip but the lane gives no max_rope_position");
  expect_refusal(edit_lane0(1 << 20), "RoPE position 1048576 is outside the table's");
}

TEST(LoraAttentionErrors, MassOutputsMissing) {
  expect_refusal([](auto& c, auto&) { c.bases()[0].mass = nullptr; }, "base 0 mass: attention mass was asked for");
  expect_refusal([](auto& c, auto&) { c.agents()[0].private_mass = nullptr; }, "agent 0's private_mass");
  expect_refusal([](auto& c, auto&) { c.bases()[0].mass_head_stride = 3; }, "mass strides");
}

TEST(LoraAttentionErrors, VectorPathTheCpuCannotRun) {
  const std::vector<cpu::VectorPath> paths = runnable_paths();
  if (paths.back() == cpu::VectorPath::kAvx512) {
    // Every path is runnable here; the refusal is covered by cpu_features' own tests and,
    // for this op, on machines without AVX-512 (the branch below).
    EXPECT_EQ(paths.size(), 3u);
    return;
  }
  LoraAttentionCase c(valid_spec());
  EXPECT_THROW(c.run(cpu::VectorPath::kAvx512), ConfigError);
}

// Integer QK needs the path's int16 dot product: the scalar path never has it.
TEST(LoraAttentionErrors, IntegerQkOnAPathWithoutIt) {
  LoraAttentionCase c(valid_spec());
  try {
    c.run(cpu::VectorPath::kScalar, 1, nullptr, nullptr, true);
    ADD_FAILURE() << "integer QK on the scalar path was not refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("integer_qk"), std::string::npos) << e.what();
  }
  kernels::LoraAttentionStats stats;
  c.run(cpu::VectorPath::kScalar, 1, &stats, nullptr, false);  // asking for the float form is always fine
  EXPECT_FALSE(stats.integer_qk);
}

TEST(LoraAttentionErrors, Int8RowsWithoutScalesOrOutsideTheBase) {
  // int8 is read with a scale per row: base storage claiming int8 without them is refused.
  static kernels::PagedStorage no_scales;
  expect_refusal([](LoraAttentionCase& c, LoraAttentionParams& p) {
    no_scales = *c.bases()[0].rows.storage;
    no_scales.dtype = kernels::ElementType::kInt8;
    c.bases()[0].rows.storage = &no_scales;
    p.bases = c.bases().data();
  }, "int8 rows need k_scales");
  // Hadamard-rotated rows must be int8.
  static kernels::PagedStorage rotated_float;
  expect_refusal([](LoraAttentionCase& c, LoraAttentionParams&) {
    rotated_float = *c.bases()[0].rows.storage;
    rotated_float.hadamard = true;
    c.bases()[0].rows.storage = &rotated_float;
  }, "Hadamard-rotated rows must be int8");
  // Residual rows are float32 or bfloat16 only.
  static kernels::PagedStorage int8_c;
  expect_refusal([](LoraAttentionCase& c, LoraAttentionParams& p) {
    int8_c = *c.agents()[0].v.c_storage;
    int8_c.dtype = kernels::ElementType::kInt8;
    c.agents()[0].v.c_storage = &int8_c;
    p.agents = c.agents().data();
  }, "int8 is for base K/V rows only");
}

}  // namespace
}  // namespace lorakv::testing

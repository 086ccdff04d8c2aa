// tests/agents/config/model/defaults_test.cpp: a config's defaults equal the sessions
// API's own (agents/session_types.h, runtime/sampler.h), compared through the options
// `lorakv run` builds from a config, so a default changed on one side fails here.
#include <gtest/gtest.h>

#include "lorakv/agents/config/load_session_config.h"
#include "lorakv/agents/config_options.h"
#include "tests/support/test_settings.h"

namespace lorakv::agents {
namespace {

config::SessionConfig minimal_config() {
  return config::load_session_config_from_string(
      "model: " + lorakv::testing::test_setting("LORAKV_MODEL") +
          "\nagents: {planner: }\nworkflow: {type: round_robin, agents: [planner]}\n",
      "defaults.yaml", "/");
}

TEST(ConfigDefaults, RuntimeAndSessionOptions) {
  const config::SessionConfig c = minimal_config();
  const RuntimeOptions mine = runtime_options(c), api;
  EXPECT_EQ(mine.dtype, api.dtype);
  EXPECT_EQ(mine.threads, api.threads);
  EXPECT_EQ(mine.kv_pool_bytes, api.kv_pool_bytes);
  EXPECT_EQ(mine.residual_rows_per_base_row, api.residual_rows_per_base_row);
  EXPECT_EQ(mine.block_size, api.block_size);
  EXPECT_EQ(mine.prefill_chunk, api.prefill_chunk);
  EXPECT_EQ(mine.step_token_budget, api.step_token_budget);
  EXPECT_EQ(mine.rerotate, api.rerotate);
  EXPECT_EQ(mine.per_head_token_sets, api.per_head_token_sets);
  const SessionOptions session = session_options(c), session_api;
  EXPECT_EQ(session.mode, session_api.mode);
  EXPECT_EQ(session.writer, session_api.writer);
}

TEST(ConfigDefaults, AgentAndGenerateOptions) {
  const config::SessionConfig c = minimal_config();
  const AgentOptions agent = agent_options(c.agents[0]);
  EXPECT_EQ(agent.name, "planner");
  EXPECT_TRUE(agent.adapter.empty());
  EXPECT_TRUE(agent.instruction.empty());
  const GenerateOptions mine = generate_options(c.agents[0]), api;
  EXPECT_EQ(mine.max_tokens, api.max_tokens);
  EXPECT_EQ(mine.sampling.temperature, api.sampling.temperature);
  EXPECT_EQ(mine.sampling.top_k, api.sampling.top_k);
  EXPECT_EQ(mine.sampling.top_p, api.sampling.top_p);
  EXPECT_EQ(mine.sampling.repetition_penalty, api.sampling.repetition_penalty);
  EXPECT_EQ(mine.sampling.seed, api.sampling.seed);
  EXPECT_EQ(mine.stop_strings, api.stop_strings);
  EXPECT_EQ(mine.allowed_prefixes, api.allowed_prefixes);
  EXPECT_NO_THROW(runtime::validate(mine.sampling));
}

}  // namespace
}  // namespace lorakv::agents

// tests/agents/config/effective_config_test.cpp: the defaults (those of the sessions API),
// the effective configuration `lorakv run --check` prints (every default written, paths
// resolved, reads back as the same configuration), and marks kept for later checks.
#include "lorakv/agents/config/session_config.h"
#include "tests/agents/config/config_test_util.h"

namespace lorakv::agents::config {
namespace {

using EffectiveConfigTest = ConfigTest;

// The YAML without its first line (the comment naming the file it came from).
std::string body(const std::string& yaml) { return yaml.substr(yaml.find('\n')); }

// The values are those of agents/session_types.h (RuntimeOptions, SessionOptions,
// GenerateOptions) and runtime/sampler.h (SamplingOptions), which need torch's headers;
// tests/agents/config/model/defaults_test.cpp compares against the structs themselves.
TEST(ConfigDefaults, EqualTheSessionsApi) {
  const ModelSection model;
  EXPECT_EQ(model.dtype, "float32");
  EXPECT_EQ(model.threads, 0);
  const CacheSection cache;
  EXPECT_EQ(cache.mode, "full");
  EXPECT_EQ(cache.writer, "first");
  EXPECT_EQ(cache.block_size, 16);
  EXPECT_EQ(cache.pool_bytes, int64_t{512} << 20);
  EXPECT_EQ(cache.residual_rows_per_base_row, 2.0);
  EXPECT_EQ(cache.prefill_chunk, 512);
  EXPECT_EQ(cache.step_token_budget, 512);
  const AgentSection agent;
  EXPECT_EQ(agent.max_tokens, 256);
  EXPECT_TRUE(agent.stop.empty());
  EXPECT_TRUE(agent.allowed_prefixes.empty());
  EXPECT_EQ(agent.sampling.temperature, 0.0);
  EXPECT_EQ(agent.sampling.top_k, 0);
  EXPECT_EQ(agent.sampling.top_p, 1.0);
  EXPECT_EQ(agent.sampling.repetition_penalty, 1.0);
  EXPECT_EQ(agent.sampling.seed, 0u);
  const WorkflowSection workflow;
  EXPECT_EQ(workflow.max_steps, 8);
  EXPECT_EQ(workflow.rounds, 1);
  EXPECT_EQ(ToolSection{}.timeout_ms, 1000);
}

TEST_F(EffectiveConfigTest, WritesEveryDefaultAndResolvedPath) {
  const SessionConfig c = load(std::string("model: model.gguf\nagents:\n  planner:\n") + kMinimalWorkflow);
  const std::string yaml = effective_config_yaml(c);
  for (const std::string& line :
       {std::string("path: \"") + dir() + "/model.gguf\"", std::string("dtype: float32"), std::string("threads: 0"),
        std::string("mode: full"), std::string("writer: first"), std::string("block_size: 16"),
        std::string("pool_bytes: 512MiB"), std::string("residual_rows_per_base_row: 2"),
        std::string("prefill_chunk: 512"), std::string("step_token_budget: 512"), std::string("max_tokens: 256"),
        std::string("sampling: {temperature: 0, top_k: 0, top_p: 1, repetition_penalty: 1, seed: 0}"),
        std::string("adapter: ~  # the base model"), std::string("rounds: 1")}) {
    EXPECT_NE(yaml.find(line), std::string::npos) << "missing `" << line << "` in:\n" << yaml;
  }
}

TEST_F(EffectiveConfigTest, ReadsBackAsTheSameConfiguration) {
  std::filesystem::create_directories(dir() + "/runs");
  const SessionConfig c = load(
      "model: {path: model.gguf, dtype: bfloat16, threads: 3}\n"
      "adapters: {planner: adapters/planner, coder: {path: adapters/coder.gguf}}\n"
      "cache: {mode: base_lr_shared, writer: base, pool_bytes: 1000, residual_rows_per_base_row: 0.1,\n"
      "        eviction: {policy: streaming_llm, budget: 1.0, sinks: 0}}\n"
      "agents:\n"
      "  planner: {adapter: planner, instruction: \"Line one\\nline two: \\\"quoted\\\"\", max_tokens: 9}\n"
      "  \"null\": {role: Critic, goal: \"~\", backstory: \"123\", sampling: {temperature: 0.7, seed: 18446744073709551615}}\n"
      "  coder: {adapter: coder, stop: [\"\\nObservation:\", \"#\"], allowed_prefixes: [\"Lookup[\"]}\n"
      "tools:\n"
      "  lookup: {type: lookup, documents: [\"Ann: born 1900, café.\"], documents_file: kb.jsonl}\n"
      "  calculate: {type: calculator, timeout_ms: 5}\n"
      "workflow: {type: react, system: \"true\", input: \"null\", planner: planner, actor: coder, tools: [calculate]}\n"
      "output: {transcript: runs/t.jsonl}\n");
  const std::string yaml = effective_config_yaml(c);
  const SessionConfig again = load_session_config_from_string(yaml, "effective.yaml", "/");
  EXPECT_EQ(body(effective_config_yaml(again)), body(yaml));
  EXPECT_EQ(again.agents[0].instruction, "Line one\nline two: \"quoted\"");
  EXPECT_EQ(again.agents[1].name, "null");
  EXPECT_EQ(again.agents[1].goal, "~");
  EXPECT_EQ(again.agents[1].backstory, "123");
  EXPECT_EQ(again.agents[1].sampling.seed, 18446744073709551615u);
  EXPECT_EQ(again.agents[1].sampling.temperature, 0.7);
  EXPECT_EQ(again.cache.residual_rows_per_base_row, 0.1);
  EXPECT_EQ(again.cache.pool_bytes, 1000);
  EXPECT_EQ(again.cache.eviction.policy, "streaming_llm");
  EXPECT_EQ(again.cache.eviction.budget_fraction, 1.0) << "a share of 1 stays a share, not one token";
  EXPECT_EQ(again.cache.eviction.sinks, 0);
  EXPECT_EQ(again.workflow.system, "true");
  EXPECT_EQ(again.workflow.input, "null");
  EXPECT_EQ(again.tools[0].entries.size(), 3u);
  EXPECT_EQ(again.tools[0].documents[0], "Ann: born 1900, café.");
  EXPECT_NE(yaml.find("# private instruction: You are Critic. 123\\nYour personal goal is: ~"), std::string::npos) << yaml;
  // The pipeline's and round robin's keys read back too.
  for (const std::string& workflow :
       {std::string("workflow: {type: pipeline, tasks: [{name: a, description: d, agent: planner}, "
                    "{name: b, description: e, expected_output: f, agent: planner, context: [a]}]}\n"),
        std::string("workflow: {type: round_robin, agents: [planner], rounds: 4}\n")}) {
    const SessionConfig w = load("model: model.gguf\nagents: {planner: {}}\n" + workflow);
    const std::string text = effective_config_yaml(w);
    EXPECT_EQ(body(effective_config_yaml(load_session_config_from_string(text, "x", "/"))), body(text));
  }
}

TEST_F(EffectiveConfigTest, MarksPointLaterChecksAtTheYaml) {
  const SessionConfig c = load("model: model.gguf\n"
                               "adapters:\n"
                               "  planner: adapters/planner\n"
                               "agents:\n"
                               "  planner:\n"
                               "    adapter: planner\n"
                               "  critic:\n" +
                               std::string(kMinimalWorkflow));
  EXPECT_EQ(c.marks.at("agents.planner.adapter").line, 6);
  EXPECT_EQ(c.marks.at("agents.planner.adapter").column, 5);
  EXPECT_EQ(c.marks.at("agents.critic.adapter").line, 7) << "falls back to the agent's key";
  EXPECT_EQ(c.marks.at("adapters.planner").line, 3);
  EXPECT_EQ(c.marks.at("workflow.agents[0]").line, 10);
  const ConfigFileError e = c.error_at("agents.planner.adapter", "mode base_lr_shared cannot serve it", "use full");
  EXPECT_EQ(std::string(e.what()),
            "config error in 'session.yaml:6:5': mode base_lr_shared cannot serve it [agents.planner.adapter] "
            "(hint: use full)");
  EXPECT_EQ(e.file(), "session.yaml");
  EXPECT_EQ(e.key_path(), "agents.planner.adapter");
}

}  // namespace
}  // namespace lorakv::agents::config

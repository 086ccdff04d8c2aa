// tests/agents/config/runtime_sections_test.cpp: the keys that set up the runtime (model,
// adapters, cache, output): values land in the struct, and each refusal names
// file:line:col, the key path and a hint. Columns and lines are asserted exactly, so a mark
// off by one fails.
#include <filesystem>

#include "tests/agents/config/config_test_util.h"

namespace lorakv::agents::config {
namespace {

using ModelSectionTest = ConfigTest;
using AdapterSectionTest = ConfigTest;
using CacheSectionTest = ConfigTest;
using OutputSectionTest = ConfigTest;

TEST_F(ModelSectionTest, ValuesLandInTheStruct) {
  const SessionConfig c = load(std::string("model:\n  path: model.gguf\n  dtype: bfloat16\n  threads: 2\n"
                                           "agents:\n  planner: {}\n") + kMinimalWorkflow);
  EXPECT_EQ(c.model.path, dir() + "/model.gguf");
  EXPECT_EQ(c.model.dtype, "bfloat16");
  EXPECT_EQ(c.model.threads, 2);
  EXPECT_EQ(c.source, "session.yaml");
  EXPECT_EQ(c.base_dir, dir());
}

TEST_F(ModelSectionTest, ShortFormIsThePath) {
  const SessionConfig c = load(std::string("model: model.gguf\nagents:\n  planner:\n") + kMinimalWorkflow);
  EXPECT_EQ(c.model.path, dir() + "/model.gguf");
  EXPECT_EQ(c.model.dtype, "float32");
  EXPECT_EQ(c.model.threads, 0);
  ASSERT_EQ(c.agents.size(), 1u);
  EXPECT_EQ(c.agents[0].name, "planner");
}

TEST_F(ModelSectionTest, HuggingFaceFolderNeedsConfigJson) {
  std::filesystem::create_directories(dir() + "/hf");
  expect_error(std::string("model: hf\nagents:\n  planner:\n") + kMinimalWorkflow,
               {"session.yaml:1:8", "[model]", "the model folder '" + dir() + "/hf' has no config.json"});
  write("hf/config.json", "{}");
  EXPECT_EQ(load(std::string("model: hf\nagents:\n  planner:\n") + kMinimalWorkflow).model.path, dir() + "/hf");
}

TEST_F(ModelSectionTest, Refusals) {
  const std::string rest = std::string("agents:\n  planner:\n") + kMinimalWorkflow;
  expect_error("model:\n  path: model.gguf\n  dtype: float16\n" + rest,
               {"session.yaml:3:10", "[model.dtype]", "`model.dtype` is `float16`", "choose one of float32, bfloat16"});
  expect_error("model:\n  path: model.gguf\n  threads: abc\n" + rest,
               {"session.yaml:3:12", "[model.threads]", "must be a whole number", "found `abc`"});
  expect_error("model:\n  path: model.gguf\n  threads: -1\n" + rest,
               {"session.yaml:3:12", "`model.threads` must be between 0 and 4096, found -1"});
  expect_error("model: missing.gguf\n" + rest,
               {"session.yaml:1:8", "[model]", "the model '" + dir() + "/missing.gguf' does not exist",
                "relative paths start at the folder of the YAML file"});
  write("notes.txt", "not a model");
  expect_error("model: notes.txt\n" + rest, {"session.yaml:1:8", "'" + dir() + "/notes.txt' is not a GGUF file"});
  expect_error(rest, {"session.yaml:1:1", "[model]", "the file needs the key `model`", "hint: model: {path:"});
  expect_error("model:\n  dtype: float32\n" + rest, {"session.yaml:2:3", "[model.path]", "`model` needs the key `path`"});
  expect_error("model:\n  pth: model.gguf\n" + rest,
               {"session.yaml:2:3", "[model.pth]", "unknown key `pth` in `model`; did you mean `path`?"});
  expect_error("model: [model.gguf]\n" + rest, {"session.yaml:1:8", "`model` must be a map of keys, found a list"});
}

TEST_F(AdapterSectionTest, ValuesLandInTheStruct) {
  const SessionConfig c = load("model: model.gguf\n"
                               "adapters:\n"
                               "  planner: adapters/planner\n"
                               "  coder: {path: adapters/coder.gguf}\n"
                               "  raw: adapters/actor/adapter_config.json\n"
                               "agents:\n"
                               "  planner: {adapter: planner}\n"
                               "  coder: {adapter: coder}\n"
                               "workflow: {type: round_robin, agents: [planner, coder]}\n");
  ASSERT_EQ(c.adapters.size(), 3u);
  EXPECT_EQ(c.adapters[0].name, "planner");
  EXPECT_EQ(c.adapters[0].path, dir() + "/adapters/planner");
  EXPECT_EQ(c.adapters[1].name, "coder");
  EXPECT_EQ(c.adapters[1].path, dir() + "/adapters/coder.gguf");
  EXPECT_EQ(c.adapters[2].path, dir() + "/adapters/actor/adapter_config.json");
  ASSERT_NE(c.find_agent("coder"), nullptr);
  EXPECT_EQ(c.find_agent("coder")->adapter, "coder");
  EXPECT_EQ(c.find_adapter("planner")->path, dir() + "/adapters/planner");
}

TEST_F(AdapterSectionTest, Refusals) {
  const std::string head = "model: model.gguf\nadapters:\n";
  const std::string rest = std::string("agents:\n  planner:\n") + kMinimalWorkflow;
  expect_error(head + "  ghost: adapters/ghost\n" + rest,
               {"session.yaml:3:10", "[adapters.ghost]", "the adapter '" + dir() + "/adapters/ghost' does not exist"});
  std::filesystem::create_directories(dir() + "/adapters/empty");
  expect_error(head + "  empty: {path: adapters/empty}\n" + rest,
               {"session.yaml:3:17", "[adapters.empty.path]", "has no adapter_config.json", "a PEFT folder"});
  expect_error(head + "  planner:\n" + rest, {"session.yaml:3:3", "the adapter `planner` has no path"});
  expect_error(head + "  planner: {path: adapters/planner, rank: 8}\n" + rest,
               {"session.yaml:3:37", "unknown key `rank` in `adapters.planner`"});
  expect_error("model: model.gguf\nadapters: [adapters/planner]\n" + rest,
               {"session.yaml:2:11", "`adapters` must be a map of name: path, found a list"});
  // An agent naming an adapter that `adapters` does not define: the mark is the value's.
  expect_error(head + "  planner: adapters/planner\nagents:\n  planner: {adapter: plannr}\n" + kMinimalWorkflow,
               {"session.yaml:5:22", "[agents.planner.adapter]",
                "`agents.planner.adapter` names the adapter `plannr`, which `adapters` does not define; did you mean "
                "`planner`?",
                "the adapters are planner"});
}

TEST_F(CacheSectionTest, ValuesLandInTheStruct) {
  const SessionConfig c = load(std::string("model: model.gguf\n"
                                           "cache:\n"
                                           "  mode: base_lr_shared\n"
                                           "  writer: base\n"
                                           "  block_size: 32\n"
                                           "  pool_bytes: 1.5GiB\n"
                                           "  residual_rows_per_base_row: 0.5\n"
                                           "  prefill_chunk: 128\n"
                                           "  step_token_budget: 0\n"
                                           "agents:\n  planner:\n") +
                               kMinimalWorkflow);
  EXPECT_EQ(c.cache.mode, "base_lr_shared");
  EXPECT_EQ(c.cache.writer, "base");
  EXPECT_EQ(c.cache.block_size, 32);
  EXPECT_EQ(c.cache.pool_bytes, int64_t{3} << 29);
  EXPECT_EQ(c.cache.residual_rows_per_base_row, 0.5);
  EXPECT_EQ(c.cache.prefill_chunk, 128);
  EXPECT_EQ(c.cache.step_token_budget, 0);
  for (const auto& [text, bytes] : std::vector<std::pair<std::string, int64_t>>{
           {"1048576", 1048576}, {"64KiB", 65536}, {"\"512 MiB\"", int64_t{512} << 20}, {"2GiB", int64_t{2} << 30}}) {
    const SessionConfig sized =
        load("model: model.gguf\ncache: {pool_bytes: " + text + "}\nagents:\n  planner:\n" + kMinimalWorkflow);
    EXPECT_EQ(sized.cache.pool_bytes, bytes) << text;
  }
}

TEST_F(CacheSectionTest, StorageKeysLandInTheStruct) {
  const std::string rest = std::string("agents:\n  planner:\n") + kMinimalWorkflow;
  const SessionConfig c = load(
      "model: model.gguf\ncache: {kv_dtype: int8, residual_dtype: bfloat16, rerotate: true, per_head_token_sets: true}\n" + rest);
  EXPECT_EQ(c.cache.kv_dtype, "int8");
  EXPECT_EQ(c.cache.residual_dtype, "bfloat16");
  EXPECT_TRUE(c.cache.rerotate);
  EXPECT_TRUE(c.cache.per_head_token_sets);
  const SessionConfig d = load("model: model.gguf\n" + rest);
  EXPECT_EQ(d.cache.kv_dtype, "") << "unset: the model's dtype";
  EXPECT_FALSE(d.cache.rerotate);
  EXPECT_FALSE(d.cache.per_head_token_sets);
}

TEST_F(CacheSectionTest, StorageKeyRefusals) {
  const std::string head = "model: model.gguf\ncache:\n";
  const std::string rest = std::string("agents:\n  planner:\n") + kMinimalWorkflow;
  expect_error(head + "  kv_dtype: int4\n" + rest,
               {"session.yaml:3:13", "[cache.kv_dtype]", "did you mean `int8`?", "float32, bfloat16, int8"});
  expect_error(head + "  residual_dtype: int8\n" + rest,
               {"session.yaml:3:19", "[cache.residual_dtype]", "float32, bfloat16"});
  expect_error(head + "  rerotate: 1\n" + rest, {"session.yaml:3:13", "[cache.rerotate]", "true, false"});
  expect_error(head + "  per_head_token_sets: yes\n" + rest, {"session.yaml:3:24", "[cache.per_head_token_sets]", "true, false"});
}

TEST_F(CacheSectionTest, Refusals) {
  const std::string head = "model: model.gguf\ncache:\n";
  const std::string rest = std::string("agents:\n  planner:\n") + kMinimalWorkflow;
  expect_error(head + "  writter: base\n" + rest,
               {"session.yaml:3:3", "[cache.writter]", "unknown key `writter` in `cache`; did you mean `writer`?",
                "the keys of `cache` are mode, writer, block_size, pool_bytes"});
  expect_error(head + "  mode: base_lr_share\n" + rest,
               {"session.yaml:3:9", "[cache.mode]", "did you mean `base_lr_shared`?",
                "choose one of full, full_shared, base_shared, base_lr_shared"});
  expect_error(head + "  block_size: -4\n" + rest,
               {"session.yaml:3:15", "[cache.block_size]", "`cache.block_size` must be between 1 and 65536, found -4"});
  expect_error(head + "  pool_bytes: 512MB\n" + rest,
               {"session.yaml:3:15", "[cache.pool_bytes]", "must be a size, found `512MB`", "KiB, MiB or GiB"});
  expect_error(head + "  pool_bytes: -1\n" + rest, {"session.yaml:3:15", "must be a size, found `-1`"});
  expect_error(head + "  pool_bytes: 0.3\n" + rest, {"must be a positive whole number of bytes, found 0.3"});
  expect_error(head + "  residual_rows_per_base_row: 0\n" + rest,
               {"session.yaml:3:31", "`cache.residual_rows_per_base_row` is out of range: 0"});
  expect_error(head + "  prefill_chunk: \"512\"\n" + rest,
               {"session.yaml:3:18", "must be a whole number", "write the number without quotes"});
  expect_error(head + "  step_token_budget: {tokens: 4}\n" + rest,
               {"session.yaml:3:22", "`cache.step_token_budget` must be a whole number", "found a map"});
  expect_error("model: model.gguf\ncache: [full]\n" + rest, {"session.yaml:2:8", "`cache` must be a map of keys"});
}

TEST_F(CacheSectionTest, EvictionKeysLandInTheStruct) {
  const std::string rest = std::string("agents:\n  planner:\n") + kMinimalWorkflow;
  const SessionConfig tokens = load("model: model.gguf\ncache:\n  eviction: {policy: h2o, budget: 1024, sinks: 2, window: 32}\n" + rest);
  EXPECT_EQ(tokens.cache.eviction.policy, "h2o");
  EXPECT_EQ(tokens.cache.eviction.budget_tokens, 1024);
  EXPECT_EQ(tokens.cache.eviction.budget_fraction, 0);
  EXPECT_EQ(tokens.cache.eviction.sinks, 2);
  EXPECT_EQ(tokens.cache.eviction.window, 32);
  const SessionConfig share = load("model: model.gguf\ncache:\n  eviction: {policy: streaming_llm, budget: 0.25}\n" + rest);
  EXPECT_EQ(share.cache.eviction.budget_fraction, 0.25);
  EXPECT_EQ(share.cache.eviction.budget_tokens, 0);
  EXPECT_EQ(share.cache.eviction.sinks, 4) << "default";
  EXPECT_FALSE(load("model: model.gguf\n" + rest).cache.eviction.enabled()) << "no eviction by default";
}

TEST_F(CacheSectionTest, EvictionRefusals) {
  const std::string head = "model: model.gguf\ncache:\n  eviction:\n";
  const std::string rest = std::string("agents:\n  planner:\n") + kMinimalWorkflow;
  expect_error(head + "    policy: h2 0\n    budget: 64\n" + rest,
               {"session.yaml:4:13", "[cache.eviction.policy]", "choose one of none, streaming_llm, h2o"});
  expect_error(head + "    policy: h2o\n" + rest,
               {"session.yaml:4:5", "[cache.eviction]", "`cache.eviction.policy` h2o needs a budget", "budget: 0.25"});
  expect_error(head + "    budget: 64\n" + rest,
               {"[cache.eviction]", "`cache.eviction.budget` is set but no policy keeps it", "policy: streaming_llm"});
  expect_error(head + "    policy: h2o\n    budget: 1.5\n" + rest, {"session.yaml:5:13", "[cache.eviction.budget]", "out of range: 1.5"});
  expect_error(head + "    policy: h2o\n    budget: 0\n" + rest, {"session.yaml:5:13", "[cache.eviction.budget]"});
  expect_error(head + "    policy: h2o\n    budget: 64\n    sink: 4\n" + rest,
               {"session.yaml:6:5", "unknown key `sink` in `cache.eviction`; did you mean `sinks`?"});
  expect_error(head + "    policy: h2o\n    budget: 64\n    window: -1\n" + rest, {"session.yaml:6:13", "[cache.eviction.window]"});
}

TEST_F(CacheSectionTest, EvictionPolicyKeysLandInTheStruct) {
  const std::string rest = std::string("agents:\n  planner:\n") + kMinimalWorkflow;
  const SessionConfig pyramid = load("model: model.gguf\ncache:\n  eviction: {policy: pyramidkv, budget: 0.5, scoring: max, "
                                     "layer_budgets: [1, 2.5], pyramid_beta: 8}\n" + rest);
  const cache::eviction::EvictionConfig& e = pyramid.cache.eviction;
  EXPECT_EQ(e.scoring, "max");
  EXPECT_EQ(e.layer_budgets, "list");
  EXPECT_EQ(e.layer_weights, (std::vector<double>{1, 2.5}));
  EXPECT_EQ(e.pyramid_beta, 8);
  const SessionConfig ada = load("model: model.gguf\ncache:\n  eviction: {policy: adakv, budget: 64, head_floor: 0.5}\n" + rest);
  EXPECT_EQ(ada.cache.eviction.head_floor, 0.5);
  EXPECT_EQ(ada.cache.eviction.layer_budgets, "pyramid") << "default";
  const SessionConfig lev = load("model: model.gguf\ncache:\n  eviction: {policy: leverage, budget: 64, leverage_rank: 4}\n" + rest);
  EXPECT_EQ(lev.cache.eviction.leverage_rank, 4);
  EXPECT_EQ(lev.cache.eviction.scoring, "auto") << "default";
  const SessionConfig cap = load("model: model.gguf\ncache:\n  eviction: {policy: capkv, budget: 64, capkv_tau: 2.5, "
                                 "capkv_future_positions: 64}\n" + rest);
  EXPECT_EQ(cap.cache.eviction.capkv_tau, 2.5);
  EXPECT_EQ(cap.cache.eviction.capkv_future_positions, 64);
  const SessionConfig grow = load("model: model.gguf\ncache:\n  eviction: {policy: h2o, budget: 64, window_growth: 0.5, "
                                  "loss_bound: true}\n" + rest);
  EXPECT_EQ(grow.cache.eviction.window_growth, 0.5);
  EXPECT_TRUE(grow.cache.eviction.loss_bound);
  EXPECT_FALSE(cap.cache.eviction.loss_bound) << "default";
  EXPECT_EQ(cap.cache.eviction.window_growth, 0) << "default";
}

TEST_F(CacheSectionTest, EvictionPolicyKeyRefusals) {
  const std::string head = "model: model.gguf\ncache:\n  eviction:\n    budget: 64\n";
  const std::string rest = std::string("agents:\n  planner:\n") + kMinimalWorkflow;
  expect_error(head + "    policy: h2o\n    scoring: mean\n" + rest,
               {"session.yaml:6:14", "[cache.eviction.scoring]", "choose one of auto, sum, max, writer"});
  expect_error(head + "    policy: streaming_llm\n    scoring: max\n" + rest,
               {"session.yaml:6:14", "[cache.eviction.scoring]", "does not score rows by attention mass"});
  expect_error(head + "    policy: pyramidkv\n    layer_budgets: cone\n" + rest,
               {"session.yaml:6:20", "[cache.eviction.layer_budgets]", "choose one of pyramid, flat"});
  expect_error(head + "    policy: pyramidkv\n    layer_budgets: [1, 0]\n" + rest,
               {"session.yaml:6:24", "[cache.eviction.layer_budgets[1]]"});
  expect_error(head + "    policy: pyramidkv\n    layer_budgets: []\n" + rest, {"[cache.eviction.layer_budgets]", "empty"});
  expect_error(head + "    policy: pyramidkv\n    pyramid_beta: 0.5\n" + rest, {"session.yaml:6:19", "[cache.eviction.pyramid_beta]"});
  expect_error(head + "    policy: adakv\n    head_floor: 2\n" + rest, {"session.yaml:6:17", "[cache.eviction.head_floor]"});
  expect_error(head + "    policy: leverage\n    leverage_rank: 0\n" + rest, {"session.yaml:6:20", "[cache.eviction.leverage_rank]"});
  expect_error(head + "    policy: capkv\n    capkv_tau: -1\n" + rest, {"session.yaml:6:16", "[cache.eviction.capkv_tau]"});
  expect_error(head + "    policy: capkv\n    capkv_future_positions: 0\n" + rest,
               {"session.yaml:6:29", "[cache.eviction.capkv_future_positions]"});
  expect_error(head + "    policy: capkv\n    scoring: sum\n" + rest, {"[cache.eviction.scoring]", "capkv's anchor"});
  expect_error(head + "    policy: h2o\n    window_growth: -0.5\n" + rest, {"session.yaml:6:20", "[cache.eviction.window_growth]"});
  expect_error(head + "    policy: h2o\n    loss_bound: yes please\n" + rest,
               {"session.yaml:6:17", "[cache.eviction.loss_bound]", "choose one of true, false"});
}

TEST_F(OutputSectionTest, ValuesLandInTheStruct) {
  std::filesystem::create_directories(dir() + "/runs");
  const SessionConfig c = load(std::string("model: model.gguf\nagents:\n  planner:\n") + kMinimalWorkflow +
                               "output:\n  transcript: runs/run.jsonl\n");
  EXPECT_EQ(c.output.transcript, dir() + "/runs/run.jsonl");
  EXPECT_TRUE(load(std::string("model: model.gguf\nagents:\n  planner:\n") + kMinimalWorkflow).output.transcript.empty());
}

TEST_F(OutputSectionTest, Refusals) {
  const std::string head = std::string("model: model.gguf\nagents:\n  planner:\n") + kMinimalWorkflow;  // 6 lines
  expect_error(head + "output:\n  transcript: nowhere/run.jsonl\n",
               {"session.yaml:8:15", "[output.transcript]", "the folder of '" + dir() + "/nowhere/run.jsonl' does not exist"});
  expect_error(head + "output:\n  transcript: adapters\n", {"session.yaml:8:15", "is a directory"});
  expect_error(head + "output:\n  transcripts: run.jsonl\n",
               {"session.yaml:8:3", "unknown key `transcripts` in `output`; did you mean `transcript`?"});
}

TEST_F(ConfigTest, UnknownTopLevelKeySuggestsTheNearest) {
  expect_error("model: model.gguf\nagent:\n  planner:\n" + std::string(kMinimalWorkflow),
               {"session.yaml:2:1", "[agent]", "unknown key `agent` at the top level; did you mean `agents`?",
                "the keys of the file are model, adapters, cache, agents, tools, workflow, output"});
}

}  // namespace
}  // namespace lorakv::agents::config

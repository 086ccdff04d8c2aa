// tests/agents/config/model/model_check_test.cpp: the model-aware check of a session config
// on the real model and role adapters: react_qa.yaml passes; adapters whose k/v A differ
// are refused in base_lr_shared with the engine's message at the YAML place of the agent's
// adapter; a broken adapter or model file is refused at its key; activated LoRA (aLoRA)
// adapters need no shared A, but an aLoRA agent's turn must invoke its adapter; the engine's
// rules for a context's eviction keys are refused at their key. No model weights load.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lorakv/agents/config/load_session_config.h"
#include "lorakv/agents/config_model_check.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/tokenizer_gguf.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/test_settings.h"

namespace lorakv::agents {
namespace {

namespace fs = std::filesystem;

fs::path source_dir() { return lorakv::testing::test_setting("LORAKV_SOURCE_DIR"); }

// A config on the real model with the role adapters of `set` (paths absolute).
std::string role_config(const std::string& set, const std::string& mode) {
  const fs::path roles = source_dir() / "assets" / "role_adapters" / set;
  return "model: " + lorakv::testing::test_setting("LORAKV_MODEL") + "\n" +
         "cache: {mode: " + mode + "}\n" +
         "adapters:\n"
         "  planner: " + (roles / "planner").string() + "\n" +
         "  actor: " + (roles / "actor").string() + "\n" +
         "agents:\n"
         "  planner: {adapter: planner}\n"
         "  actor: {adapter: actor}\n"
         "workflow: {type: react, planner: planner, actor: actor}\n";
}

config::SessionConfig load(const std::string& yaml) {
  return config::load_session_config_from_string(yaml, "session.yaml", source_dir().string());
}

template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected a ConfigFileError";
  } catch (const config::ConfigFileError& e) {
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "missing `" << needle << "` in: " << e.what();
    }
  }
}

TEST(ConfigModelCheck, ReactQaPasses) {
  const config::SessionConfig c = config::load_session_config((source_dir() / "configs" / "react_qa.yaml").string());
  const ConfigModelReport report = check_config_against_model(c);
  EXPECT_EQ(report.architecture, "llama");
  EXPECT_EQ(report.num_layers, 30);
  ASSERT_EQ(report.adapters.size(), 3u);
  EXPECT_EQ(report.adapters[0].format, "peft");
  EXPECT_EQ(report.adapters[0].modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(report.adapters[0].max_rank, 8);
}

TEST(ConfigModelCheck, EveryExampleConfigPasses) {
  for (const auto& entry : fs::directory_iterator(source_dir() / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(check_config_against_model(config::load_session_config(entry.path().string())));
  }
}

TEST(ConfigModelCheck, ModeThatCannotServeTheAdaptersIsRefusedAtTheAgent) {
  EXPECT_NO_THROW(check_config_against_model(load(role_config("all_linear", "full"))));
  EXPECT_NO_THROW(check_config_against_model(load(role_config("qv_shared_a", "base_lr_shared"))));
  // all_linear's planner and actor have their own A on k_proj and v_proj: one C stream cannot serve both.
  expect_error([] { check_config_against_model(load(role_config("all_linear", "base_lr_shared"))); },
               {"session.yaml:8:11", "[agents.actor.adapter]",
                "mode base_lr_shared keeps one residual C = X A per module for all readers, but adapter 'actor' and "
                "adapter 'planner' differ in A on k_proj at layer 0",
                "the mode is `cache.mode` (session.yaml:2:9)", "or use base_shared"});
}

TEST(ConfigModelCheck, BrokenFilesAreRefusedAtTheirKey) {
  const std::string fake = lorakv::testing::temp_path("config-model-check-fake.gguf");
  std::ofstream(fake, std::ios::binary) << std::string("GGUF") + std::string(60, '\0');
  std::string yaml = role_config("qv_shared_a", "full");
  yaml.replace(yaml.find("  actor: /"), yaml.find('\n', yaml.find("  actor: /")) - yaml.find("  actor: /"),
               "  actor: " + fake);
  expect_error([&] { check_config_against_model(load(yaml)); },
               {"session.yaml:5:3", "[adapters.actor]", fake, "the adapter must be trained for this model"});
  expect_error([&] { check_config_against_model(load("model: " + fake + "\nagents: {planner: {}}\n"
                                                      "workflow: {type: round_robin, agents: [planner]}\n")); },
               {"session.yaml:1:1", "[model.path]", fake});
  // Not std::filesystem::remove: linked with libtorch, that binds to its broken exported copy.
  std::remove(fake.c_str());
}

// What the engine refuses of a session's context when it opens (rerotate keeps streaming_llm
// only, adakv needs a token set per KV head, layer_budgets needs one weight per layer) is
// refused here, before any weight loads, at the YAML key in the file.
TEST(ConfigModelCheck, EngineContextRulesAreRefusedAtTheirKey) {
  auto config = [](const std::string& cache) {
    return "model: " + lorakv::testing::test_setting("LORAKV_MODEL") + "\n" + "cache: " + cache + "\n" +
           "agents: {planner: {}}\nworkflow: {type: round_robin, agents: [planner]}\n";
  };
  expect_error([&] { check_config_against_model(load(config("{rerotate: true, eviction: {policy: snapkv, budget: 64}}"))); },
               {"session.yaml:2:", "[cache.eviction.policy]", "rerotate keeps streaming_llm contexts only", "snapkv"});
  EXPECT_NO_THROW(check_config_against_model(load(config("{rerotate: true, eviction: {policy: streaming_llm, budget: 64}}"))));
  expect_error([&] { check_config_against_model(load(config("{eviction: {policy: adakv, budget: 64}}"))); },
               {"session.yaml:2:", "[cache.eviction.policy]", "each KV head must keep its own rows",
                "cache.per_head_token_sets: true"});
  EXPECT_NO_THROW(check_config_against_model(load(config("{per_head_token_sets: true, eviction: {policy: adakv, budget: 64}}"))));
  expect_error([&] { check_config_against_model(load(config("{eviction: {policy: pyramidkv, budget: 64, layer_budgets: [1, 2]}}"))); },
               {"session.yaml:2:", "[cache.eviction.layer_budgets]", "one weight per layer", "30 weights"});
}

// The all-linear `role` adapter's files as an aLoRA PEFT directory invoked by `invocation`.
std::string alora_copy(const std::string& role, const std::string& invocation) {
  const auto file = formats::GgufFile::open(lorakv::testing::test_setting("LORAKV_MODEL"));
  const std::vector<int32_t> ids = formats::tokenizer_from_gguf(*file).encode(invocation);
  const fs::path from = source_dir() / "assets" / "role_adapters" / "all_linear" / role;
  const fs::path to = lorakv::testing::temp_path("config-model-check-alora-" + role);
  fs::create_directories(to);
  fs::copy_file(from / "adapter_model.safetensors", to / "adapter_model.safetensors", fs::copy_options::overwrite_existing);
  std::stringstream config;
  config << std::ifstream(from / "adapter_config.json").rdbuf();
  std::string json = config.str(), list = "[";
  for (size_t i = 0; i < ids.size(); ++i) list += (i ? ", " : "") + std::to_string(ids[i]);
  const std::string key = "\"alora_invocation_tokens\": null";  // as PEFT writes a standard LoRA
  const size_t at = json.find(key);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) json.replace(at, key.size(), "\"alora_invocation_tokens\": " + list + "]");
  std::ofstream(to / "adapter_config.json") << json;
  return to.string();
}

TEST(ConfigModelCheck, ActivatedLoraAgentsNeedNoSharedAButMustInvokeTheirAdapter) {
  const std::string planner = alora_copy("planner", "<|im_start|>planner\n");
  const std::string actor = alora_copy("actor", "<|im_start|>actor\n");
  std::string yaml = role_config("all_linear", "base_lr_shared");
  const fs::path roles = source_dir() / "assets" / "role_adapters" / "all_linear";
  yaml.replace(yaml.find((roles / "planner").string()), (roles / "planner").string().size(), planner);
  yaml.replace(yaml.find((roles / "actor").string()), (roles / "actor").string().size(), actor);
  // The same factors that base_lr_shared refuses as standard adapters (test above) serve as aLoRA.
  EXPECT_NO_THROW(check_config_against_model(load(yaml)));
  std::string misnamed = yaml;
  misnamed.replace(misnamed.find("  actor: {adapter: actor}"), std::string("  actor: {adapter: actor}").size(),
                   "  critic: {adapter: actor}");
  misnamed.replace(misnamed.find("actor: actor}\n"), std::string("actor: actor}\n").size(), "actor: critic}\n");
  expect_error([&] { check_config_against_model(load(misnamed)); },
               {"[agents.critic.adapter]", "agent 'critic' uses an activated LoRA whose invocation tokens are not in its turn",
                "'<|im_start|>actor\\n'", "'<|im_start|>critic\\n'", "name the agent by the turn the adapter was trained on"});
}

}  // namespace
}  // namespace lorakv::agents

// tests/agents/config/example_configs_test.cpp: every configs/*.yaml of the tree loads
// (its paths relative to configs/, the model as tools/fetch_model.sh puts it in models/),
// react_qa.yaml describes the agentic QA task of tools/agentic_qa/README.md, and the
// committed fuzz inputs of fuzz/session_config_fuzzer.cpp either load or end in a
// ConfigFileError.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/agents/config/config_test_util.h"
#include "tests/support/fuzz_corpus.h"
#include "tests/support/test_settings.h"

namespace lorakv::agents::config {
namespace {

namespace fs = std::filesystem;

fs::path source_dir() { return lorakv::testing::test_setting("LORAKV_SOURCE_DIR"); }

std::vector<fs::path> example_configs() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(source_dir() / "configs")) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class ExampleConfigs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")) {
      GTEST_SKIP() << "models/SmolLM2-135M-Instruct.Q4_1.gguf is missing: run tools/fetch_model.sh (make test does)";
    }
  }
};

TEST_F(ExampleConfigs, EveryFileLoads) {
  const std::vector<fs::path> files = example_configs();
  ASSERT_GE(files.size(), 3u);
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    try {
      const SessionConfig c = load_session_config(file.string());
      EXPECT_FALSE(effective_config_yaml(c).empty());
    } catch (const ConfigFileError& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST_F(ExampleConfigs, ReactQaIsTheAgenticQaTask) {
  const SessionConfig c = load_session_config((source_dir() / "configs" / "react_qa.yaml").string());
  EXPECT_EQ(c.model.path, (source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").lexically_normal().string());
  EXPECT_EQ(c.cache.mode, "base_lr_shared");
  ASSERT_EQ(c.agents.size(), 3u);
  for (const char* role : {"planner", "actor", "reflector"}) {
    const AgentSection* agent = c.find_agent(role);
    ASSERT_NE(agent, nullptr) << role;
    EXPECT_EQ(agent->adapter, role);
    EXPECT_TRUE(agent->private_instruction().empty()) << "the role adapters were trained without instructions";
    EXPECT_EQ(c.find_adapter(role)->path,
              (source_dir() / "assets" / "role_adapters" / "qv_shared_a" / role).lexically_normal().string());
  }
  EXPECT_EQ(c.workflow.type, "react");
  EXPECT_EQ(c.workflow.system, "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].");
  EXPECT_EQ(c.workflow.planner, "planner");
  EXPECT_EQ(c.workflow.actor, "actor");
  EXPECT_EQ(c.workflow.reflector, "reflector");
  const ToolSection* lookup = c.find_tool("lookup");
  ASSERT_NE(lookup, nullptr);
  EXPECT_EQ(lookup->entries.size(), 96u) << "assets/agentic_qa/kb_test.jsonl";
  ASSERT_NE(c.find_tool("calculate"), nullptr);
  EXPECT_EQ(c.find_tool("calculate")->type, "calculator");
}

// The fuzzer's committed inputs, against the same scratch folder layout it loads them in.
TEST_F(ConfigTest, FuzzCorpusEndsInALoadOrAConfigFileError) {
  const auto files = lorakv::testing::fuzz_corpus("session_config");
  ASSERT_FALSE(files.empty()) << "fuzz/corpus/session_config has no inputs";
  int loaded = 0;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    try {
      load_session_config_from_string(bytes.str(), file.filename().string(), dir());
      ++loaded;
    } catch (const ConfigFileError&) {
    }
  }
  EXPECT_GE(loaded, 3) << "the valid seeds should load";
}

}  // namespace
}  // namespace lorakv::agents::config

// tests/agents/configured_session_test.cpp: the react example config (configs/react_qa.yaml)
// through the same calls `lorakv run` makes, one capped episode per sharing mode: in `full`
// the trajectory is the Python runner's for this question (assets/role_adapters/eval/
// episodes.csv, test-00094) and the answer is right; every mode runs to an end within its
// step limit. A mode that cannot serve an adapter is refused at the agent's YAML place. The
// activated LoRA example (configs/react_qa_alora.yaml) plays PEFT's aLoRA episode
// (run_episodes.py --set alora) in base_shared and full, since its agents read the base rows exactly.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "lorakv/agents/config/load_session_config.h"
#include "lorakv/agents/configured_session.h"
#include "lorakv/runtime/sharing_mode.h"
#include "tests/agents/session_test_util.h"

namespace lorakv::agents {
namespace {

// The config's mode and writer names are the engine's (runtime/sharing_mode.h): a name added
// to one and not the other fails here, not at a user's `lorakv run`.
TEST(ConfigNames, ModesAndWritersAreTheEnginesNames) {
  std::vector<std::string> modes, writers;
  for (runtime::SharingMode m : {runtime::SharingMode::kFull, runtime::SharingMode::kFullShared,
                                 runtime::SharingMode::kBaseShared, runtime::SharingMode::kBaseLrShared}) {
    modes.push_back(runtime::sharing_mode_name(m));
  }
  for (runtime::SharedWriter w : {runtime::SharedWriter::kFirst, runtime::SharedWriter::kBase, runtime::SharedWriter::kAuthor}) {
    writers.push_back(runtime::shared_writer_name(w));
  }
  EXPECT_EQ(config::cache_mode_names(), modes);
  EXPECT_EQ(config::cache_writer_names(), writers);
  for (const std::string& w : config::cache_writer_names()) EXPECT_TRUE(runtime::parse_shared_writer(w).has_value()) << w;
  EXPECT_FALSE(runtime::parse_shared_writer("authors").has_value());
}

config::SessionConfig example(const std::string& file) {
  return config::load_session_config(lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/configs/" + file);
}

config::SessionConfig react_config(const std::string& mode) {
  config::SessionConfig c = example("react_qa.yaml");
  c.cache.mode = mode;
  return c;
}

// The agents' turns of a run, by name, in order.
std::vector<std::string> agent_turns(const WorkflowResult& r) {
  std::vector<std::string> names;
  for (const WorkflowTurn& t : r.turns) {
    if (t.kind == WorkflowTurn::Kind::kAgent) names.push_back(t.role);
  }
  return names;
}

// The Python runner's transcript of test-00094 (qv_shared_a, greedy).
const char* kPythonTranscript =
    "[planner] Thought: look up Thou Futrel.\nAction: Lookup | [actor] Lookup[Thou Futrel] | [tool] Thou Futrel: born "
    "1705, lives in Quegou, works as baker. | [planner] Thought: look up Quegou.\nAction: Lookup | [actor] "
    "Lookup[Quegou] | [tool] Quegou: city founded 1145, mayor Bro Vukror. | [planner] Thought: I know the "
    "answer.\nAction: Finish | [actor] Finish[Bro Vukror] | [reflector] Given: Bro Vukror. Expected: Bro "
    "Vukror.\nVerdict: right.";

TEST(ConfiguredSession, ReactExampleRunsInEveryMode) {
  std::unique_ptr<Runtime> rt;
  for (const char* mode : {"full", "full_shared", "base_shared", "base_lr_shared"}) {
    SCOPED_TRACE(mode);
    const config::SessionConfig c = react_config(mode);
    if (!rt) rt = std::make_unique<Runtime>(runtime_options(c));
    auto session = open_configured_session(*rt, c);
    const ToolRegistry tools = configured_tools(c);
    const ConfiguredRun run = run_configured_workflow(*session, c, tools, "");
    ASSERT_TRUE(run.react.has_value());
    EXPECT_LE(run.result.steps, c.workflow.max_steps);
    EXPECT_GE(run.result.turns.size(), 4u);  // system and user, then at least a planner and an actor turn
    if (std::string(mode) == "full") {
      EXPECT_EQ(transcript(run.result), kPythonTranscript);
      EXPECT_EQ(run.result.answer.value_or(""), "Bro Vukror");
      EXPECT_EQ(run.react->verdict, "right");
    }
    session->close();
  }
}

// PEFT's transcript of test-00094 with the activated LoRA roles (run_episodes.py --set alora:
// one cache of base K/V, each turn's header and reply adapted; greedy). The standard sets
// write the same words here, so this shows the example runs end to end in every mode; the
// activation itself is checked token by token in tests/runtime/engine_alora_test.cpp and
// against PEFT in tests/adapters/alora_parity_test.cpp.
const char* kPythonAloraTranscript =
    "[planner] Thought: look up Thou Futrel.\nAction: Lookup | [actor] Lookup[Thou Futrel] | [tool] Thou Futrel: born "
    "1705, lives in Quegou, works as baker. | [planner] Thought: look up Quegou.\nAction: Lookup | [actor] "
    "Lookup[Quegou] | [tool] Quegou: city founded 1145, mayor Bro Vukror. | [planner] Thought: I know the "
    "answer.\nAction: Finish | [actor] Finish[Bro Vukror] | [reflector] Given: Bro Vukror. Expected: Bro "
    "Vukror.\nVerdict: right.";

// aLoRA agents read one base cache of the trajectory with no approximation, so the shared
// modes play the same episode as `full` and as PEFT, token for token (the standard sets'
// shared modes change most episodes: bench/results/agentic_qa/episodes.md).
TEST(ConfiguredSession, AloraReactExampleIsPeftsEpisodeSharedAndInFull) {
  std::unique_ptr<Runtime> rt;
  for (const char* mode : {"base_shared", "full"}) {  // the file's mode; bench episodes runs the rest
    SCOPED_TRACE(mode);
    config::SessionConfig c = example("react_qa_alora.yaml");
    c.cache.mode = mode;
    if (!rt) rt = std::make_unique<Runtime>(runtime_options(c));
    auto session = open_configured_session(*rt, c);
    const ConfiguredRun run = run_configured_workflow(*session, c, configured_tools(c), "");
    EXPECT_EQ(transcript(run.result), kPythonAloraTranscript);
    EXPECT_EQ(run.result.answer.value_or(""), "Bro Vukror");
    session->close();
  }
}

// The pipeline and round-robin examples, each turn capped at 4 tokens: the tasks' agents in
// order (pipeline), the agents in order each round (round robin), every turn appended.
TEST(ConfiguredSession, PipelineAndRoundRobinExamplesRunCapped) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> expected = {
      {"pipeline.yaml", {"researcher", "writer", "editor"}},
      {"chat_round_robin.yaml", {"optimist", "skeptic", "optimist", "skeptic"}}};
  for (const auto& [file, turns] : expected) {
    SCOPED_TRACE(file);
    config::SessionConfig c = example(file);
    for (config::AgentSection& a : c.agents) a.max_tokens = 4;
    Runtime rt(runtime_options(c));
    auto session = open_configured_session(rt, c);
    const ConfiguredRun run = run_configured_workflow(*session, c, configured_tools(c), "");
    EXPECT_EQ(agent_turns(run.result), turns);
    EXPECT_TRUE(run.result.stopped_by.empty()) << run.result.stopped_by;
    for (const WorkflowTurn& t : run.result.turns) {
      if (t.kind == WorkflowTurn::Kind::kAgent) {
        EXPECT_TRUE(t.reply.appended) << t.role;
      }
    }
  }
}

// base_lr_shared needs one A for every reader: the all-linear planner and the shared-A actor
// differ, and the refusal points at the actor's entry in the YAML.
TEST(ConfiguredSession, AModeThatCannotServeAnAdapterIsRefusedAtItsYamlPlace) {
  config::SessionConfig c = react_config("base_lr_shared");
  for (config::AdapterSection& a : c.adapters) {
    if (a.name == "planner") a.path = testing::role_adapter_path("all_linear", "planner");
  }
  Runtime rt(runtime_options(c));
  try {
    open_configured_session(rt, c);
    FAIL() << "no refusal";
  } catch (const config::ConfigFileError& e) {
    EXPECT_NE(std::string(e.what()).find("react_qa.yaml:"), std::string::npos) << e.what();
    EXPECT_NE(e.key_path().find("agents."), std::string::npos) << e.key_path();
  }
}

}  // namespace
}  // namespace lorakv::agents

// tests/cli/run_command_test.cpp: `lorakv run` on the committed example configs and on a
// small config written here: --check prints the effective configuration, the react example
// streams its turns, tool calls and summary, --json prints one JSON object per event, the
// transcript is the same for the same config and input (stats aside), --interactive runs
// the workflow once per line on one growing session, and bad arguments are refused.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/cli/cli.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/json.h"
#include "tests/support/test_settings.h"

namespace lorakv::cli {
namespace {

std::string source(const std::string& relative) {
  return lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/" + relative;
}

std::string run(const std::vector<std::string>& args, const std::string& input = "") {
  std::istringstream in(input);
  std::ostringstream out;
  EXPECT_EQ(run_run(args, in, out), 0);
  return out.str();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A round-robin config on the base model with short turns, writing a transcript next to
// it; the model path comes from the environment, as a user's config may take it.
std::string small_config(const std::string& dir) {
  setenv("LORAKV_TEST_MODEL", lorakv::testing::test_setting("LORAKV_MODEL").c_str(), 1);
  const std::string path = dir + "/small.yaml";
  std::ofstream(path) << "model: ${LORAKV_TEST_MODEL}\n"
                         "cache: {mode: full_shared, pool_bytes: 64MiB}\n"
                         "agents:\n"
                         "  alice: {max_tokens: 6, instruction: \"You answer briefly.\"}\n"
                         "  bob: {max_tokens: 6, sampling: {temperature: 0.8, seed: 7}}\n"
                         "workflow: {type: round_robin, agents: [alice, bob], rounds: 1, input: \"Hello.\"}\n"
                         "output: {transcript: transcript.jsonl}\n";
  return path;
}

std::string scratch_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/lorakv_run_" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

// The transcript's lines without their "stats" (the only part that varies between runs).
std::vector<std::string> transcript_without_stats(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    formats::JsonValue turn = formats::parse_json(line);
    std::string kept;
    for (const auto& [key, value] : turn.as_object()) {
      if (key != "stats") kept += key + "=" + value.to_string() + ";";
    }
    out.push_back(kept);
  }
  return out;
}

TEST(RunCommand, CheckPrintsTheEffectiveConfiguration) {
  const std::string out = run({"--check", source("configs/react_qa.yaml")});
  EXPECT_TRUE(contains(out, "mode: base_lr_shared")) << out;
  EXPECT_TRUE(contains(out, "step_token_budget: 512")) << out;  // a default filled in
  EXPECT_TRUE(contains(out, source("models/"))) << out;         // the model path resolved
}

TEST(RunCommand, BadArgumentsAreRefused) {
  std::istringstream in;
  std::ostringstream out;
  EXPECT_THROW(run_run({}, in, out), ConfigError);
  EXPECT_THROW(run_run({"a.yaml", "b.yaml"}, in, out), ConfigError);
  EXPECT_THROW(run_run({source("configs/react_qa.yaml"), "--input", "x", "--interactive"}, in, out), ConfigError);
  EXPECT_THROW(run_run({"--check", source("configs/react_qa.yaml"), "--threads", "many"}, in, out), ConfigError);
  try {
    run_run({source("configs/react_qa.yaml"), "--log-level", "loud"}, in, out);
    FAIL() << "accepted --log-level loud";
  } catch (const UsageError& e) {
    EXPECT_TRUE(contains(e.what(), "[--log-level]")) << e.what();
  }
  try {
    run_run({"no/such/config.yaml"}, in, out);
    FAIL() << "accepted a missing file";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "no/such/config.yaml")) << e.what();
  }
}

// What `run` refuses of a config for the file itself, `run --check` refuses too, with the same
// message (file:line:col and the YAML key), before any weight loads.
TEST(RunCommand, CheckRefusesWhatRunRefusesWithTheSameMessage) {
  const std::string dir = scratch_dir("check_refusals");
  setenv("LORAKV_TEST_MODEL", lorakv::testing::test_setting("LORAKV_MODEL").c_str(), 1);
  // Each cache section, and the key its refusal names.
  const std::vector<std::pair<std::string, std::string>> caches = {
      {"{rerotate: true, eviction: {policy: snapkv, budget: 64}}", "[cache.eviction.policy]"},
      {"{eviction: {policy: adakv, budget: 64}}", "[cache.eviction.policy]"},
      // 1 MiB holds 22 float32 rows of this model: not the reply's 4 tokens beside its header.
      {"{pool_bytes: 1MiB}", "[cache.pool_bytes]"},
      // In full each agent holds the context at its budget: 2 x 256 rows beside a reply.
      {"{mode: full, pool_bytes: 20MiB, eviction: {policy: snapkv, budget: 240}}", "[cache.pool_bytes]"}};
  for (size_t i = 0; i < caches.size(); ++i) {
    const std::string path = dir + "/refused" + std::to_string(i) + ".yaml";
    std::ofstream(path) << "model: ${LORAKV_TEST_MODEL}\ncache: " << caches[i].first
                        << "\nagents: {alice: {max_tokens: 4}, bob: {max_tokens: 4}}\n"
                           "workflow: {type: round_robin, agents: [alice, bob], input: Hi}\n";
    auto refusal = [&](std::vector<std::string> args) -> std::string {
      std::istringstream in;
      std::ostringstream out;
      try {
        run_run(args, in, out);
      } catch (const Error& e) {
        EXPECT_TRUE(out.str().empty()) << "printed before refusing: " << out.str();
        return e.what();
      }
      return "accepted";
    };
    const std::string checked = refusal({"--check", path});
    EXPECT_TRUE(contains(checked, path + ":2:")) << checked;
    EXPECT_TRUE(contains(checked, caches[i].second)) << checked;
    EXPECT_EQ(refusal({path}), checked);
  }
}

// The react example (base_lr_shared, the actor constrained to its three actions) streams
// each turn with its agent's name and the tool calls, answers, and sums up.
TEST(RunCommand, ReactExampleStreamsTurnsToolCallsAndSummary) {
  const std::string out = run({source("configs/react_qa.yaml")});
  for (const char* part : {"[user] Who is the mayor of the city where Thou Futrel lives?", "[planner] Thought: look up",
                           "[actor] Lookup[Thou Futrel]", "  -> lookup(Thou Futrel)", "[tool] Thou Futrel: born 1705",
                           "answer: Bro Vukror", "summary (base_lr_shared", ", no eviction)",
                           "3 full float32 caches of the whole trajectory would hold"}) {
    EXPECT_TRUE(contains(out, part)) << "missing " << part << " in\n" << out;
  }
}

TEST(RunCommand, JsonPrintsOneObjectPerEventThenTheSummary) {
  const std::string dir = scratch_dir("json");
  const std::string out = run({small_config(dir), "--json"});
  std::istringstream lines(out);
  std::vector<std::string> events;
  for (std::string line; std::getline(lines, line);) events.push_back(formats::parse_json(line).at("event").as_string());
  ASSERT_GE(events.size(), 6u) << out;
  EXPECT_EQ(events.front(), "append");  // the user's input
  EXPECT_EQ(events.back(), "summary");
  EXPECT_EQ(std::count(events.begin(), events.end(), "turn_start"), 2);
  EXPECT_EQ(std::count(events.begin(), events.end(), "turn_end"), 2);
  EXPECT_EQ(std::count(events.begin(), events.end(), "result"), 1);
}

TEST(RunCommand, SameConfigAndInputGiveTheSameTranscript) {
  const std::string dir = scratch_dir("transcript");
  const std::string config = small_config(dir);
  run({config, "--input", "Name one colour."});
  const std::vector<std::string> first = transcript_without_stats(dir + "/transcript.jsonl");
  run({config, "--input", "Name one colour."});
  const std::vector<std::string> second = transcript_without_stats(dir + "/transcript.jsonl");
  ASSERT_EQ(first.size(), 3u);  // user, alice, bob
  EXPECT_EQ(first, second);
  EXPECT_TRUE(contains(first[0], "Name one colour.")) << first[0];
  run({config, "--input", "Name one animal."});
  EXPECT_NE(transcript_without_stats(dir + "/transcript.jsonl"), first);
}

// Each line read is one run of the workflow on the same session: two inputs, four turns,
// and the workflow's system turn once, at the start.
TEST(RunCommand, InteractiveRunsTheWorkflowPerLineOnOneSession) {
  const std::string dir = scratch_dir("interactive");
  const std::string config = small_config(dir);
  std::string yaml;
  {
    std::ifstream in(config);
    yaml.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string rounds = "rounds: 1,";
  yaml.replace(yaml.find(rounds), rounds.size(), "rounds: 1, system: \"Be brief.\",");
  std::ofstream(config) << yaml;
  run({config, "--interactive"}, "First question.\nSecond question.\n");
  const std::vector<std::string> turns = transcript_without_stats(dir + "/transcript.jsonl");
  ASSERT_EQ(turns.size(), 7u);
  EXPECT_TRUE(contains(turns[0], "role=\"system\"")) << turns[0];
  EXPECT_TRUE(contains(turns[1], "First question.")) << turns[1];
  EXPECT_TRUE(contains(turns[4], "Second question.")) << turns[4];
  EXPECT_TRUE(contains(turns[4], "role=\"user\"")) << turns[4];
}

// With --json a failure is an error event, the last line, before the exit code.
TEST(RunCommand, JsonFailureEndsTheStreamWithAnErrorEvent) {
  const std::string dir = scratch_dir("json_error");
  const std::string config = dir + "/bad.yaml";
  std::ofstream(config) << "model: no-such-model.gguf\n";
  std::istringstream in;
  std::ostringstream out, err;
  EXPECT_EQ(run_cli_main({"run", config, "--json"}, out, err), kExitError);
  const formats::JsonValue event = formats::parse_json(out.str());
  EXPECT_EQ(event.at("event").as_string(), "error");
  EXPECT_EQ(event.at("exit_code").as_int(), kExitError);
  EXPECT_NE(event.at("message").as_string().find("bad.yaml:1:"), std::string::npos) << out.str();
  EXPECT_NE(err.str().find("bad.yaml:1:"), std::string::npos) << err.str();
}

}  // namespace
}  // namespace lorakv::cli

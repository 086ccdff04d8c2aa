// tests/agents/workflow_react_test.cpp: run_react on the real model with the qv_shared_a
// role adapters reproduces tools/agentic_qa/run_episodes.py: for held-out questions of
// three kinds, the transcript equals the committed one (assets/role_adapters/eval/
// episodes.csv, set qv_shared_a) turn for turn, with the same answer, success, rounds,
// verdict and trajectory length. The runner's limits (max_steps, the token limit with an
// invalid action) are checked on cut-short episodes; base_lr_shared runs one to the end.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/agents/builtin_tools.h"
#include "lorakv/agents/workflows.h"
#include "tests/agents/workflow_test_util.h"

namespace lorakv::agents {
namespace {

using Row = std::map<std::string, std::string>;

// RFC 4180 records (quoted fields may hold newlines and doubled quotes), as csv.DictWriter writes.
std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::vector<std::string>> records(1);
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') field += text[++i];
      else if (c == '"') quoted = false;
      else field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      records.back().push_back(std::move(field));
      field.clear();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      records.back().push_back(std::move(field));
      field.clear();
      records.emplace_back();
    } else {
      field += c;
    }
  }
  if (records.back().empty()) records.pop_back();
  return records;
}

// The committed episode of `id` in adapter set `set`.
Row episode(const std::string& set, const std::string& id) {
  static const std::vector<std::vector<std::string>> records = read_csv(
      lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/assets/role_adapters/eval/episodes.csv");
  const std::vector<std::string>& header = records.at(0);
  for (size_t r = 1; r < records.size(); ++r) {
    Row row;
    for (size_t c = 0; c < header.size() && c < records[r].size(); ++c) row[header[c]] = records[r][c];
    if (row["set"] == set && row["id"] == id) return row;
  }
  ADD_FAILURE() << "no episode " << id << " of set " << set;
  return {};
}

const ToolRegistry& task_tools() {
  static const std::unique_ptr<ToolRegistry> tools = [] {
    auto t = std::make_unique<ToolRegistry>();
    t->add(calculator_tool());
    t->add(lookup_tool(std::make_shared<DocumentStore>(DocumentStore::from_jsonl(
        lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/assets/agentic_qa/kb_test.jsonl"))));
    return t;
  }();
  return *tools;
}

// run_episodes.py's settings: --max-rounds 6, --max-new 40, greedy; logprobs for the margins.
ReactSpec python_runner_spec() {
  ReactSpec spec;
  spec.max_steps = 6;
  for (WorkflowAgent* agent : {&spec.planner, &spec.actor, &*spec.reflector}) agent->options.logprobs = true;
  return spec;
}

// Equal turn for turn, or a near tie (docs/testing.md): the first differing turn is an
// agent's whose smallest top-2 margin is under kBatchMargin (the Python's own margins are
// not recorded; ours bound where float32 could order two candidates either way).
void expect_same_transcript(const ReactResult& ours, const std::string& python, const std::string& id) {
  const std::vector<std::string> a = transcript_turns(transcript(ours)), b = transcript_turns(python);
  size_t d = 0;
  while (d < a.size() && d < b.size() && a[d] == b[d]) ++d;
  if (d == a.size() && d == b.size()) return;
  double margin = 1e9;
  size_t turn = 0;
  for (const WorkflowTurn& t : ours.turns) {
    if (t.kind == WorkflowTurn::Kind::kPrompt) continue;
    if (turn++ != d || t.kind != WorkflowTurn::Kind::kAgent) continue;
    for (size_t i = 0; i < t.reply.logprobs.size(); ++i) {
      margin = std::min(margin, t.reply.logprobs[i] - t.reply.runner_up_logprobs[i]);
    }
  }
  ASSERT_LT(margin, testing::kBatchMargin) << id << ": turn " << d << " differs (smallest margin " << margin
                                           << ")\n ours:   " << (d < a.size() ? a[d] : "(none)")
                                           << "\n python: " << (d < b.size() ? b[d] : "(none)");
  std::printf("  near tie accepted: %s turn %zu, margin %.2e\n", id.c_str(), d, margin);
}

void expect_python_episode(const std::string& id) {
  const Row row = episode("qv_shared_a", id);
  auto session = testing::qv_role_session();
  const ReactResult r = run_react(*session, python_runner_spec(), row.at("question"), task_tools());
  std::printf("  %s: %s\n", id.c_str(), transcript(r).c_str());
  expect_same_transcript(r, row.at("transcript"), id);
  const std::string answer = r.answer.value_or("");
  EXPECT_EQ(answer, row.at("answer")) << id;
  EXPECT_EQ(answer == row.at("gold") && r.answer.has_value() ? "1" : "0", row.at("success")) << id;
  EXPECT_EQ(r.finished ? "1" : "0", row.at("finished")) << id;
  EXPECT_EQ(std::to_string(r.steps), row.at("rounds")) << id;
  EXPECT_EQ(r.verdict, row.at("verdict")) << id;
  EXPECT_EQ(r.planner_actor_consistent ? "1" : "0", row.at("planner_actor_consistent")) << id;
  EXPECT_EQ(std::to_string(session->tokens().size()), row.at("tokens")) << id;
  // The trajectory is the trained layout: system, user, then every turn as recorded.
  std::vector<std::pair<std::string, std::string>> turns;
  for (const WorkflowTurn& t : r.turns) turns.emplace_back(t.role, t.text);
  EXPECT_EQ(session->text(), testing::render_turns(turns)) << id;
  EXPECT_TRUE(r.stopped_by.empty()) << r.stopped_by;
}

TEST(WorkflowReact, OneLookupMatchesThePythonRunner) { expect_python_episode("test-00209"); }
TEST(WorkflowReact, TwoLookupsMatchThePythonRunner) { expect_python_episode("test-00094"); }
TEST(WorkflowReact, LookupAndCalculateMatchThePythonRunner) { expect_python_episode("test-00258"); }

// Cut at max_steps: the rounds run are the Python's first rounds, then the episode ends
// unfinished with no reflector turn (run_episodes.py: rounds = max_rounds, answer None).
TEST(WorkflowReact, StopsAtMaxSteps) {
  const Row row = episode("qv_shared_a", "test-00094");  // three rounds in the Python
  ReactSpec spec = python_runner_spec();
  spec.max_steps = 2;
  auto session = testing::qv_role_session();
  const ReactResult r = run_react(*session, spec, row.at("question"), task_tools());
  const std::vector<std::string> python = transcript_turns(row.at("transcript"));
  std::string first_two_rounds = python[0];
  for (size_t i = 1; i < 6; ++i) first_two_rounds += " | " + python[i];
  EXPECT_EQ(transcript(r), first_two_rounds);
  EXPECT_EQ(r.steps, 2);
  EXPECT_FALSE(r.finished);
  EXPECT_FALSE(r.answer.has_value());
  EXPECT_EQ(r.verdict, "");
  EXPECT_EQ(r.turns.back().role, "tool");
}

// An actor turn cut by its token limit is closed with <|im_end|> (as the Python forces it)
// and, not being an action, answered with "Error: unknown action."; the round counts.
TEST(WorkflowReact, InvalidActionAtTheTokenLimit) {
  const Row row = episode("qv_shared_a", "test-00209");
  ReactSpec spec = python_runner_spec();
  spec.max_steps = 1;
  spec.actor.options.max_tokens = 3;
  auto session = testing::qv_role_session();
  const ReactResult r = run_react(*session, spec, row.at("question"), task_tools());
  ASSERT_EQ(r.turns.size(), 5u);  // system, user, planner, actor, tool
  const WorkflowTurn& actor = r.turns[3];
  EXPECT_EQ(actor.reply.end, ReplyEnd::kLength);
  EXPECT_EQ(actor.reply.tokens.size(), 3u);
  EXPECT_EQ(r.turns[4].text, kUnknownActionText);
  EXPECT_EQ(r.turns[4].tool, "");
  EXPECT_FALSE(r.planner_actor_consistent);
  EXPECT_EQ(r.steps, 1);
  EXPECT_FALSE(r.finished);
  const std::string tail =
      "<|im_start|>actor\n" + actor.text + "<|im_end|>\n<|im_start|>tool\nError: unknown action.<|im_end|>\n";
  const std::string text = session->text();
  ASSERT_GE(text.size(), tail.size());
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail);
}

// base_lr_shared (one shared base cache plus the shared-A residual rows) runs an episode to
// its end with well-formed turns; its tokens may differ from `full`'s, so no equality.
// Free-running, its actor tends to write a bare "Finish" (no answer, an invalid action)
// until max_steps, on 5 of 5 questions tried with either writer; with the actions as
// allowed prefixes (what GenerateOptions::allowed_prefixes is for) it finishes.
TEST(WorkflowReact, BaseLrSharedRunsAnEpisode) {
  const Row row = episode("qv_shared_a", "test-00209");
  SessionOptions options;
  options.mode = runtime::SharingMode::kBaseLrShared;
  auto session = testing::qv_role_session(options);
  ReactSpec spec = python_runner_spec();
  spec.actor.options.allowed_prefixes = {"Lookup[", "Calculate[", "Finish["};
  std::vector<std::string> events;
  WorkflowObserver observer;
  observer.on_turn_start = [&](const std::string& agent) { events.push_back("start " + agent); };
  observer.on_turn_end = [&](const std::string& agent, const Reply&) { events.push_back("end " + agent); };
  observer.on_tool_call = [&](const std::string& tool, const std::string&) { events.push_back("call " + tool); };
  const ReactResult r = run_react(*session, spec, row.at("question"), task_tools(), observer);
  std::printf("  base_lr_shared: %s\n", transcript(r).c_str());
  EXPECT_TRUE(r.finished);
  EXPECT_FALSE(r.answer.value_or("").empty());
  EXPECT_GE(r.steps, 1);
  EXPECT_LE(r.steps, 6);
  ASSERT_GE(r.turns.size(), 5u);
  EXPECT_EQ(r.turns[2].role, "planner");
  EXPECT_EQ(r.turns[2].text.rfind("Thought:", 0), 0u) << r.turns[2].text;
  EXPECT_EQ(r.turns.back().role, "reflector");
  EXPECT_TRUE(r.verdict == "right" || r.verdict == "wrong") << r.verdict;
  EXPECT_EQ(events.front(), "start planner");
  EXPECT_EQ(events.back(), "end reflector");
  std::vector<std::pair<std::string, std::string>> turns;
  for (const WorkflowTurn& t : r.turns) turns.emplace_back(t.role, t.text);
  EXPECT_EQ(session->text(), testing::render_turns(turns));
}

}  // namespace
}  // namespace lorakv::agents

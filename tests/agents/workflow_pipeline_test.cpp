// tests/agents/workflow_pipeline_test.cpp: run_pipeline and run_round_robin on the real
// model (a few tokens per turn): the trajectory holds exactly the expected turns, in order,
// with their roles and texts; the observer sees every turn; bad specs are refused before
// anything is appended.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lorakv/agents/errors.h"
#include "lorakv/agents/workflows.h"
#include "tests/agents/workflow_test_util.h"

namespace lorakv::agents {
namespace {

using Turns = std::vector<std::pair<std::string, std::string>>;

WorkflowAgent short_agent(const std::string& name, int64_t tokens) {
  WorkflowAgent agent{name, {}};
  agent.options.max_tokens = tokens;
  return agent;
}

Turns turns_of(const WorkflowResult& r) {
  Turns turns;
  for (const WorkflowTurn& t : r.turns) turns.emplace_back(t.role, t.text);
  return turns;
}

PipelineSpec two_task_pipeline() {
  PipelineSpec spec;
  spec.system = "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].";
  spec.agents = {short_agent("planner", 6), short_agent("actor", 4)};
  spec.tasks = {{"plan", "Plan how to answer: {input}", "a thought and an action", "planner", {}},
                {"act", "Write the action for {input}", "", "actor", {"plan"}}};
  return spec;
}

TEST(WorkflowPipeline, AppendsEachTaskThenItsAgentsTurn) {
  auto session = testing::qv_role_session();
  std::vector<std::string> events;
  WorkflowObserver observer;
  observer.on_append = [&](const std::string& role, const std::string&) { events.push_back("append " + role); };
  observer.on_turn_start = [&](const std::string& agent) { events.push_back("start " + agent); };
  observer.on_turn_end = [&](const std::string& agent, const Reply&) { events.push_back("end " + agent); };
  std::string streamed;
  observer.on_text = [&](const std::string& agent, const std::string& piece) {
    if (agent == "planner") streamed += piece;
  };
  const std::string question = "How old was Dok Gramein in 1940?";
  const WorkflowResult r = run_pipeline(*session, two_task_pipeline(), question, observer);

  ASSERT_EQ(r.turns.size(), 5u);
  const Turns expected = {
      {"system", "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer]."},
      {"user", "Plan how to answer: " + question + "\nExpected output: a thought and an action"},
      {"planner", r.turns[2].text},
      {"user", "Write the action for " + question},
      {"actor", r.turns[4].text},
  };
  EXPECT_EQ(turns_of(r), expected);
  EXPECT_EQ(session->text(), testing::render_turns(expected));
  EXPECT_LE(r.turns[2].reply.tokens.size(), 6u);
  EXPECT_LE(r.turns[4].reply.tokens.size(), 4u);
  EXPECT_FALSE(r.turns[2].text.empty());
  EXPECT_EQ(streamed, r.turns[2].text);
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.answer, r.turns[4].text);
  EXPECT_EQ(events, (std::vector<std::string>{"append system", "append user", "start planner", "end planner",
                                              "append user", "start actor", "end actor"}));
}

// Tasks that do not name {input}: the input is a user turn of its own before the first task,
// so it reaches the agents anyway.
TEST(WorkflowPipeline, InputNoTaskNamesGoesInAsItsOwnTurn) {
  auto session = testing::qv_role_session();
  PipelineSpec spec = two_task_pipeline();
  spec.system.clear();
  spec.tasks[0].description = "Plan how to answer the question.";
  spec.tasks[1].description = "Write the action.";
  const std::string question = "How old was Dok Gramein in 1940?";
  const WorkflowResult r = run_pipeline(*session, spec, question, {});
  ASSERT_GE(r.turns.size(), 2u);
  EXPECT_EQ(turns_of(r)[0], (std::pair<std::string, std::string>{"user", question}));
  EXPECT_EQ(r.turns[1].text, "Plan how to answer the question.\nExpected output: a thought and an action");
  // With {input} named, no extra turn: the first turn is the task's.
  const WorkflowResult named = run_pipeline(*testing::qv_role_session(), two_task_pipeline(), question, {});
  EXPECT_EQ(named.turns[1].role, "user");
  EXPECT_EQ(named.turns[1].text.rfind("Plan how to answer: " + question, 0), 0u);
}

TEST(WorkflowPipeline, RefusesBadSpecsBeforeAppending) {
  auto session = testing::qv_role_session();
  PipelineSpec spec = two_task_pipeline();
  spec.tasks[1].context = {"act"};  // itself, not an earlier task
  EXPECT_THROW(run_pipeline(*session, spec, "q"), ConfigError);
  spec = two_task_pipeline();
  spec.tasks[1].agent = "critic";  // not among the spec's agents
  EXPECT_THROW(run_pipeline(*session, spec, "q"), ConfigError);
  spec = two_task_pipeline();
  spec.tasks[1].name = "plan";
  EXPECT_THROW(run_pipeline(*session, spec, "q"), ConfigError);
  spec = two_task_pipeline();
  spec.agents.push_back(short_agent("critic", 2));  // not in the session
  EXPECT_THROW(run_pipeline(*session, spec, "q"), UnknownAgentError);
  EXPECT_TRUE(session->tokens().empty());
}

TEST(WorkflowRoundRobin, EachAgentInOrderEachRound) {
  auto session = testing::qv_role_session();
  RoundRobinSpec spec;
  spec.agents = {short_agent("planner", 3), short_agent("actor", 2)};
  spec.rounds = 2;
  const std::string question = "What is the job of Dok Gramein?";
  const WorkflowResult r = run_round_robin(*session, spec, question);
  ASSERT_EQ(r.turns.size(), 5u);
  const Turns expected = {{"user", question},
                          {"planner", r.turns[1].text},
                          {"actor", r.turns[2].text},
                          {"planner", r.turns[3].text},
                          {"actor", r.turns[4].text}};
  EXPECT_EQ(turns_of(r), expected);
  EXPECT_EQ(session->text(), testing::render_turns(expected));
  for (size_t i = 1; i < r.turns.size(); ++i) {
    EXPECT_EQ(r.turns[i].kind, WorkflowTurn::Kind::kAgent);
    EXPECT_LE(r.turns[i].reply.tokens.size(), i % 2 == 1 ? 3u : 2u);
  }
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.answer, r.turns[4].text);

  spec.rounds = -1;
  EXPECT_THROW(run_round_robin(*session, spec, question), ConfigError);
}

}  // namespace
}  // namespace lorakv::agents

// tests/agents/config/agent_sections_test.cpp: the keys that change tokens: agents (turn
// names, adapters, private instructions, generation options), tools and the workflow.
// Values land in the struct; each refusal names file:line:col, the key path and a hint.
#include <filesystem>

#include "tests/agents/config/config_test_util.h"

namespace lorakv::agents::config {
namespace {

using AgentsSectionTest = ConfigTest;
using ToolsSectionTest = ConfigTest;
using WorkflowSectionTest = ConfigTest;

const char* const kModelAndAdapters = "model: model.gguf\n"
                                      "adapters:\n"
                                      "  planner: adapters/planner\n"
                                      "  actor: adapters/actor\n";  // 4 lines

TEST_F(AgentsSectionTest, ValuesLandInTheStruct) {
  const SessionConfig c = load(std::string(kModelAndAdapters) +
                               "agents:\n"
                               "  planner:\n"
                               "    adapter: planner\n"
                               "    instruction: Plan the next step.\n"
                               "    max_tokens: 64\n"
                               "    sampling: {temperature: 0.7, top_k: 40, top_p: 0.9, repetition_penalty: 1.1, seed: 7}\n"
                               "    stop: [\"\\nObservation:\"]\n"
                               "    allowed_prefixes: [\"Lookup[\", \"Finish[\"]\n"
                               "  researcher:\n"
                               "    role: Senior Researcher\n"
                               "    goal: Find the facts\n"
                               "    backstory: You check every source.\n"
                               "  critic:\n"
                               "workflow: {type: round_robin, agents: [planner, researcher, critic]}\n");
  ASSERT_EQ(c.agents.size(), 3u);
  const AgentSection& planner = c.agents[0];
  EXPECT_EQ(planner.name, "planner");
  EXPECT_EQ(planner.adapter, "planner");
  EXPECT_EQ(planner.private_instruction(), "Plan the next step.");
  EXPECT_EQ(planner.max_tokens, 64);
  EXPECT_EQ(planner.sampling.temperature, 0.7);
  EXPECT_EQ(planner.sampling.top_k, 40);
  EXPECT_EQ(planner.sampling.top_p, 0.9);
  EXPECT_EQ(planner.sampling.repetition_penalty, 1.1);
  EXPECT_EQ(planner.sampling.seed, 7u);
  EXPECT_EQ(planner.stop, std::vector<std::string>{"\nObservation:"});
  EXPECT_EQ(planner.allowed_prefixes, (std::vector<std::string>{"Lookup[", "Finish["}));
  const AgentSection& researcher = c.agents[1];
  EXPECT_TRUE(researcher.adapter.empty());
  EXPECT_EQ(researcher.private_instruction(),
            "You are Senior Researcher. You check every source.\nYour personal goal is: Find the facts");
  const AgentSection& critic = c.agents[2];  // `critic:` alone: the base model with every default
  EXPECT_TRUE(critic.adapter.empty());
  EXPECT_TRUE(critic.private_instruction().empty());
  EXPECT_EQ(critic.max_tokens, 256);
  EXPECT_EQ(critic.sampling.temperature, 0.0);
}

TEST_F(AgentsSectionTest, CrewStyleInstructionLeavesOutMissingParts) {
  AgentSection agent;
  agent.goal = "Win";
  EXPECT_EQ(agent.private_instruction(), "Your personal goal is: Win");
  agent.role = "Judge";
  EXPECT_EQ(agent.private_instruction(), "You are Judge.\nYour personal goal is: Win");
  agent.goal.clear();
  agent.backstory = "Fair.";
  EXPECT_EQ(agent.private_instruction(), "You are Judge. Fair.");
}

TEST_F(AgentsSectionTest, Refusals) {
  const std::string head = std::string(kModelAndAdapters) + "agents:\n  planner:\n";  // the agent's keys from line 7
  const std::string rest = kMinimalWorkflow;
  expect_error(head + "    sampling: {temperature: -0.5}\n" + rest,
               {"session.yaml:7:29", "[agents.planner.sampling.temperature]",
                "`agents.planner.sampling.temperature` is out of range: -0.5", ">= 0; 0 is greedy"});
  expect_error(head + "    sampling: {top_p: 1.5}\n" + rest,
               {"session.yaml:7:23", "[agents.planner.sampling.top_p]", "out of range: 1.5", "in (0, 1]"});
  expect_error(head + "    sampling: {top_p: 0}\n" + rest, {"session.yaml:7:23", "out of range: 0"});
  expect_error(head + "    sampling: {temprature: 0.5}\n" + rest,
               {"session.yaml:7:16", "unknown key `temprature` in `agents.planner.sampling`; did you mean `temperature`?"});
  expect_error(head + "    sampling: {seed: -1}\n" + rest,
               {"session.yaml:7:22", "[agents.planner.sampling.seed]", "must be a whole number from 0"});
  expect_error(head + "    instruction: {text: hi}\n" + rest,
               {"session.yaml:7:18", "[agents.planner.instruction]", "`agents.planner.instruction` must be text, found a map"});
  expect_error(head + "    instruction: Plan.\n    role: Planner\n" + rest,
               {"session.yaml:7:18", "[agents.planner.instruction]", "is given together with role/goal/backstory",
                "You are {role}. {backstory}\\nYour personal goal is: {goal}"});
  expect_error(head + "    max_tokens: abc\n" + rest,
               {"session.yaml:7:17", "[agents.planner.max_tokens]", "must be a whole number", "found `abc`"});
  expect_error(head + "    max_tokens: 0\n" + rest, {"session.yaml:7:17", "must be between 1 and 1048576, found 0"});
  expect_error(head + "    stop: \"\\nObservation:\"\n" + rest,
               {"session.yaml:7:11", "[agents.planner.stop]", "must be a list of texts"});
  expect_error(head + "    allowed_prefixes: [\"Lookup[\", \"\"]\n" + rest,
               {"session.yaml:7:35", "[agents.planner.allowed_prefixes[1]]", "is empty"});
  expect_error(head + "    adapter: planner\n  planner:\n" + rest,
               {"session.yaml:8:3", "duplicate key `planner` in `agents`", "the first is at line 6"});
  expect_error(std::string(kModelAndAdapters) + "agents:\n  user: {}\n" + rest,
               {"session.yaml:6:3", "[agents.user]", "`user` is the trajectory's own turn name"});
  expect_error(std::string(kModelAndAdapters) + "agents:\n  \"plan\\nner\": {}\n" + rest,
               {"session.yaml:6:3", "must be one line of text"});
  expect_error(std::string(kModelAndAdapters) + "agents: {}\n" + rest,
               {"session.yaml:5:9", "`agents` must be a map of turn name: agent, with at least one agent"});
}

TEST_F(ToolsSectionTest, ValuesLandInTheStruct) {
  const SessionConfig c = load(std::string("model: model.gguf\nagents:\n  planner:\n") +
                               "tools:\n"
                               "  lookup:\n"
                               "    type: lookup\n"
                               "    description: Finds a document by name.\n"
                               "    documents: [\"Ann Ko: born 1914.\", \"Zed: city founded 1402.\"]\n"
                               "    documents_file: kb.jsonl\n"
                               "  calculate: {type: calculator, description: Integer arithmetic., timeout_ms: 250}\n" +
                               kMinimalWorkflow);
  ASSERT_EQ(c.tools.size(), 2u);
  const ToolSection& lookup = c.tools[0];
  EXPECT_EQ(lookup.name, "lookup");
  EXPECT_EQ(lookup.type, "lookup");
  EXPECT_EQ(lookup.description, "Finds a document by name.");
  EXPECT_EQ(lookup.documents.size(), 2u);
  EXPECT_EQ(lookup.documents_file, dir() + "/kb.jsonl");
  ASSERT_EQ(lookup.entries.size(), 4u);
  EXPECT_EQ(lookup.entries[0].name, "Ann Ko");
  EXPECT_EQ(lookup.entries[1].name, "Zed");
  EXPECT_EQ(lookup.entries[2].name, "Dok Gramein");
  EXPECT_EQ(lookup.entries[2].text, "Dok Gramein: born 1914, lives in Gramfal.");
  EXPECT_EQ(lookup.entries[3].name, "Gramfal");  // no "name" field: the text before the colon
  const ToolSection& calculate = c.tools[1];
  EXPECT_EQ(calculate.type, "calculator");
  EXPECT_EQ(calculate.timeout_ms, 250);
  EXPECT_EQ(c.find_tool("calculate"), &calculate);
}

TEST_F(ToolsSectionTest, Refusals) {
  const std::string head = "model: model.gguf\nagents:\n  planner:\ntools:\n";  // the tools from line 5
  const std::string rest = kMinimalWorkflow;
  expect_error(head + "  lookup: {type: lookup, documents_file: nowhere.jsonl}\n" + rest,
               {"session.yaml:5:42", "[tools.lookup.documents_file]",
                "the documents file '" + dir() + "/nowhere.jsonl' does not exist"});
  write("bad.jsonl", "{\"text\": \"A: first\"}\n{oops\n");
  expect_error(head + "  lookup: {type: lookup, documents_file: bad.jsonl}\n" + rest,
               {"session.yaml:5:42", "line 2 of '" + dir() + "/bad.jsonl'", "one JSON object per line"});
  write("nameless.jsonl", "{\"text\": \"no colon here\"}\n");
  expect_error(head + "  lookup: {type: lookup, documents_file: nameless.jsonl}\n" + rest,
               {"line 1 of '" + dir() + "/nameless.jsonl'", "no \"name\""});
  expect_error(head + "  lookup: {type: lookup, documents: [\"Ann: one\", \"no colon\"]}\n" + rest,
               {"session.yaml:5:50", "[tools.lookup.documents[1]]", "has no name before a colon"});
  expect_error(head + "  lookup: {type: lookup, documents: [\"Ann: one\", \"Ann: two\"]}\n" + rest,
               {"session.yaml:5:50", "two documents of `lookup` are named `Ann`"});
  expect_error(head + "  lookup: {type: lookup}\n" + rest,
               {"session.yaml:5:11", "[tools.lookup]", "the lookup tool `lookup` has no documents"});
  expect_error(head + "  calculate: {type: calculator, documents: [\"a: b\"]}\n" + rest,
               {"session.yaml:5:33", "unknown key `documents` in `tools.calculate`",
                "the keys of `tools.calculate` are type, description, timeout_ms"});
  expect_error(head + "  calculate: {description: adds}\n" + rest,
               {"session.yaml:5:14", "[tools.calculate.type]", "`tools.calculate` needs the key `type`"});
  expect_error(head + "  calculate: {type: calculater}\n" + rest,
               {"session.yaml:5:21", "did you mean `calculator`?", "choose one of lookup, calculator"});
  expect_error(head + "  calculate: {type: calculator, timeout_ms: 0}\n" + rest,
               {"session.yaml:5:45", "[tools.calculate.timeout_ms]", "must be between 1 and 3600000, found 0"});
  expect_error(head + "  Lookup: {type: lookup, documents: [\"a: b\"]}\n" + rest,
               {"session.yaml:5:3", "[tools.Lookup]", "must be lower-case letters"});
  expect_error(head + "  finish: {type: calculator}\n" + rest, {"session.yaml:5:3", "`finish` is the workflow's own action"});
}

TEST_F(WorkflowSectionTest, ReactValuesLandInTheStruct) {
  const SessionConfig c = load(std::string("model: model.gguf\n") +
                               "agents: {planner: {}, actor: {}, reflector: {}}\n"
                               "tools:\n"
                               "  lookup: {type: lookup, documents_file: kb.jsonl}\n"
                               "  calculate: {type: calculator}\n"
                               "workflow:\n"
                               "  type: react\n"
                               "  system: \"Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].\"\n"
                               "  input: How old was Dok Gramein in 1940?\n"
                               "  planner: planner\n"
                               "  actor: actor\n"
                               "  reflector: reflector\n"
                               "  max_steps: 6\n"
                               "  tools: [lookup]\n");
  const WorkflowSection& w = c.workflow;
  EXPECT_EQ(w.type, "react");
  EXPECT_EQ(w.system, "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].");
  EXPECT_EQ(w.input, "How old was Dok Gramein in 1940?");
  EXPECT_EQ(w.planner, "planner");
  EXPECT_EQ(w.actor, "actor");
  EXPECT_EQ(w.reflector, "reflector");
  EXPECT_EQ(w.max_steps, 6);
  EXPECT_EQ(w.tools, std::vector<std::string>{"lookup"});
  // Without `tools`, react uses every tool; without `reflector`, none; max_steps defaults to 8.
  const SessionConfig d = load(std::string("model: model.gguf\n") +
                               "agents: {planner: {}, actor: {}}\n"
                               "tools: {lookup: {type: lookup, documents_file: kb.jsonl}, calculate: {type: calculator}}\n"
                               "workflow: {type: react, planner: planner, actor: actor}\n");
  EXPECT_EQ(d.workflow.tools, (std::vector<std::string>{"lookup", "calculate"}));
  EXPECT_TRUE(d.workflow.reflector.empty());
  EXPECT_EQ(d.workflow.max_steps, 8);
}

TEST_F(WorkflowSectionTest, PipelineAndRoundRobinValuesLandInTheStruct) {
  const SessionConfig p = load(std::string("model: model.gguf\n") +
                               "agents: {researcher: {}, writer: {}}\n"
                               "workflow:\n"
                               "  type: pipeline\n"
                               "  tasks:\n"
                               "    - name: research\n"
                               "      description: Find three facts.\n"
                               "      expected_output: A list of facts.\n"
                               "      agent: researcher\n"
                               "    - {name: write, description: Write a paragraph., agent: writer, context: [research]}\n");
  ASSERT_EQ(p.workflow.tasks.size(), 2u);
  EXPECT_EQ(p.workflow.tasks[0].name, "research");
  EXPECT_EQ(p.workflow.tasks[0].expected_output, "A list of facts.");
  EXPECT_EQ(p.workflow.tasks[0].agent, "researcher");
  EXPECT_EQ(p.workflow.tasks[1].context, std::vector<std::string>{"research"});
  EXPECT_TRUE(p.workflow.tasks[1].expected_output.empty());
  const SessionConfig r = load(std::string("model: model.gguf\n") +
                               "agents: {researcher: {}, writer: {}}\n"
                               "workflow: {type: round_robin, agents: [writer, researcher], rounds: 3, input: Hi}\n");
  EXPECT_EQ(r.workflow.agents, (std::vector<std::string>{"writer", "researcher"}));
  EXPECT_EQ(r.workflow.rounds, 3);
  EXPECT_EQ(r.workflow.input, "Hi");
  EXPECT_EQ(load(std::string("model: model.gguf\nagents:\n  planner:\n") + kMinimalWorkflow).workflow.rounds, 1);
}

TEST_F(WorkflowSectionTest, Refusals) {
  const std::string head = std::string("model: model.gguf\n") +
                           "agents: {planner: {}, actor: {}}\n"
                           "tools: {lookup: {type: lookup, documents_file: kb.jsonl}}\n"
                           "workflow:\n";  // the workflow's keys from line 5
  expect_error(head + "  type: react\n  planner: planer\n  actor: actor\n",
               {"session.yaml:6:12", "[workflow.planner]",
                "`workflow.planner` names the agent `planer`, which `agents` does not define; did you mean `planner`?",
                "the agents are planner, actor"});
  expect_error(head + "  type: react\n  actor: actor\n",
               {"session.yaml:5:3", "[workflow.planner]", "`workflow` needs the key `planner`"});
  expect_error(head + "  type: react\n  planner: planner\n  actor: actor\n  tools: [lookup, search]\n",
               {"session.yaml:8:19", "[workflow.tools[1]]", "names the tool `search`, which `tools` does not define"});
  expect_error(head + "  type: react\n  planner: planner\n  actor: actor\n  rounds: 2\n",
               {"session.yaml:8:3", "unknown key `rounds` in `workflow`", "the keys of `workflow` are type, system, input, planner"});
  expect_error(head + "  type: reactive\n", {"session.yaml:5:9", "choose one of react, pipeline, round_robin"});
  expect_error(head + "  planner: planner\n", {"session.yaml:5:3", "[workflow.type]", "`workflow` needs the key `type`"});
  expect_error(head + "  type: round_robin\n  agents: [planner, planner]\n",
               {"session.yaml:6:21", "[workflow.agents[1]]", "names `planner` twice"});
  expect_error(head + "  type: round_robin\n  agents: [planner]\n  rounds: 0\n",
               {"session.yaml:7:11", "[workflow.rounds]", "must be between 1 and 10000, found 0"});
  expect_error(head + "  type: pipeline\n  tasks:\n    - {name: a, description: d, agent: planner, context: [b]}\n"
                      "    - {name: b, description: d, agent: actor}\n",
               {"session.yaml:7:59", "[workflow.tasks[0].context[0]]", "names the task `b`, which comes later",
                "reorder the tasks"});
  expect_error(head + "  type: pipeline\n  tasks:\n    - {name: a, description: d, agent: planner, context: [a]}\n",
               {"session.yaml:7:59", "which is this task itself"});
  expect_error(head + "  type: pipeline\n  tasks:\n    - {name: a, description: d, agent: planner}\n"
                      "    - {name: b, description: d, agent: actor, context: [z]}\n",
               {"session.yaml:8:57", "[workflow.tasks[1].context[0]]", "names the task `z`, which `workflow.tasks` does not define"});
  expect_error(head + "  type: pipeline\n  tasks:\n    - {name: a, description: d, agent: coder}\n",
               {"session.yaml:7:40", "[workflow.tasks[0].agent]", "names the agent `coder`"});
  expect_error(head + "  type: pipeline\n  tasks:\n    - {name: a, agent: planner}\n",
               {"session.yaml:7:7", "[workflow.tasks[0].description]", "`workflow.tasks[0]` needs the key `description`"});
  expect_error(head + "  type: pipeline\n  tasks:\n    - {name: a, description: d, agent: planner}\n"
                      "    - {name: a, description: d, agent: actor}\n",
               {"session.yaml:8:14", "two tasks are named `a`"});
  expect_error(head + "  type: pipeline\n  tasks: []\n", {"session.yaml:6:10", "must be a list of at least one task"});
  expect_error(std::string("model: model.gguf\nagents: {planner: {}}\n"), {"the file needs the key `workflow`"});
}

}  // namespace
}  // namespace lorakv::agents::config

// agents/workflows.h: ready-made workflows over one Session: a pipeline of tasks, agents in
// round robin, and the ReAct loop (agents/workflow_react.h). Each is ordinary code over the
// public Session API (agents/observed_session.h), so a user writes their own the same way.
// Each streams through a WorkflowObserver and returns a WorkflowResult; each checks its
// spec (agents present, names valid) before appending anything.
//
// Every agent reads the whole trajectory: turns are appended in order and never removed,
// so whatever was written earlier in the session is in every later agent's context.
#pragma once

#include <string>
#include <vector>

#include "lorakv/agents/session.h"
#include "lorakv/agents/workflow_react.h"
#include "lorakv/agents/workflow_types.h"

namespace lorakv::agents {

// A task for one agent, as CrewAI writes them.
struct PipelineTask {
  std::string name;         // what later tasks' `context` calls it; may be empty
  std::string description;  // "{input}" is replaced by the workflow's input
  std::string expected_output;  // when given, "\nExpected output: <it>" follows the description
  std::string agent;        // one of the spec's agents
  // Earlier tasks whose output this task builds on. On a shared append-only trajectory
  // every earlier turn is in the agent's context already, so `context` adds nothing to the
  // prompt and hides nothing from it; it is checked (each name an earlier task's) so a spec
  // written for a framework that passes only the named outputs still says what it means.
  std::vector<std::string> context;
};

struct PipelineSpec {
  std::vector<WorkflowAgent> agents;  // every agent a task names, with its generation settings
  std::vector<PipelineTask> tasks;    // run in order
  std::string system;                 // when not empty, a system turn first (ObservedSession::append_system)
};

// Per task: a `user` turn with its description (and expected output), then the task's
// agent writes its turn. answer: the last task's output; steps: tasks run. Throws
// UnknownAgentError, or ConfigError for a task naming an agent not in spec.agents, a task
// name given twice, or a context that names no earlier task.
WorkflowResult run_pipeline(Session& session, const PipelineSpec& spec, const std::string& input,
                            const WorkflowObserver& observer = {});

struct RoundRobinSpec {
  std::vector<WorkflowAgent> agents;  // in speaking order
  int rounds = 1;
  std::string system;  // when not empty, a system turn first (ObservedSession::append_system)
};

// The input as a `user` turn, then each agent in order, `rounds` times. answer: the last
// turn's text; steps: rounds run. Throws UnknownAgentError, or ConfigError for no agents
// or negative rounds.
WorkflowResult run_round_robin(Session& session, const RoundRobinSpec& spec, const std::string& input,
                               const WorkflowObserver& observer = {});

// The user turn of a pipeline task (its description with the input, and expected output).
std::string task_prompt(const PipelineTask& task, const std::string& input);

}  // namespace lorakv::agents

// agents/workflow_types.h: what the workflows (agents/workflows.h) take and report: the
// agents with their generation settings, the observer that streams a run, and the result.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lorakv/agents/session_types.h"
#include "lorakv/agents/tools.h"

namespace lorakv::agents {

// An agent of the session (Session::add_agent) and how it generates in this workflow.
struct WorkflowAgent {
  std::string name;
  GenerateOptions options;  // its on_text, if any, still runs after the observer's
};

// Streaming callbacks, each optional. on_text runs on the engine thread (GenerateOptions::
// on_text): it must not call a Session method that waits; the others run on the thread
// that runs the workflow.
struct WorkflowObserver {
  std::function<void(const std::string& role, const std::string& text)> on_append;  // system, user, tool turns
  std::function<void(const std::string& agent)> on_turn_start;
  std::function<void(const std::string& agent, const std::string& piece)> on_text;
  std::function<void(const std::string& agent, const Reply& reply)> on_turn_end;
  std::function<void(const std::string& tool, const std::string& argument)> on_tool_call;
  std::function<void(const std::string& tool, const ToolResult& result)> on_tool_result;
};

// One turn a workflow added to the trajectory.
struct WorkflowTurn {
  enum class Kind { kPrompt, kAgent, kTool };  // system or user text; an agent's reply; a tool's output
  Kind kind = Kind::kPrompt;
  std::string role;       // "system", "user", "tool", or the agent's name
  std::string text;       // the turn's text (an agent's: Reply::text)
  Reply reply;            // kAgent: the reply, with its tokens and timings
  std::string tool;       // kTool: the tool called; empty when no tool ran (an invalid action)
  ToolResult tool_result; // kTool
};

struct WorkflowResult {
  // react: the Finish argument, stripped; pipeline: the last task's output; round robin:
  // the last turn's text. Empty when the workflow ended without one.
  std::optional<std::string> answer;
  int steps = 0;  // react: rounds (as run_episodes.py counts them); pipeline: tasks; round robin: rounds
  std::vector<WorkflowTurn> turns;  // in trajectory order
  // Empty when the workflow ran to its end; else why it stopped early: an agent's reply that
  // was not appended ("actor: cancelled", "planner: deadline").
  std::string stopped_by;
};

// The agents' and tools' turns as run_episodes.py's transcript column writes them:
// "[planner] Thought: ... | [actor] Lookup[X] | [tool] X: ..." (prompt turns left out).
std::string transcript(const WorkflowResult& result);
// A transcript split back into its turns ("[planner] Thought: ...", "[actor] Lookup[X]", ...).
std::vector<std::string> transcript_turns(const std::string& transcript);

}  // namespace lorakv::agents

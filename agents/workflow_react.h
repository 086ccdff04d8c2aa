// agents/workflow_react.h: the ReAct loop of the agentic QA task, the layout and loop of
// tools/agentic_qa/run_episodes.py:
//   system turn, user turn (the question); then per round: the planner's turn, the actor's
//   turn, and the actor's action run: a tool's output (or "Error: unknown action." for text
//   that is no action) appended as a `tool` turn; until the actor writes Finish[answer] or
//   max_steps rounds have run. After a Finish the reflector, if any, writes its turn, and
//   the episode ends.
// A turn that reaches its token limit is closed with <|im_end|> by the session, as the
// Python forces it (agents/session.h), and its text is read as it is.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lorakv/agents/session.h"
#include "lorakv/agents/tools.h"
#include "lorakv/agents/workflow_types.h"

namespace lorakv::agents {

inline constexpr const char* kReactSystemPrompt = "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].";
inline constexpr int64_t kReactMaxNewTokens = 40;  // run_episodes.py --max-new: every role's turn
inline constexpr const char* kUnknownActionText = "Error: unknown action.";

// An agent of the react loop with run_episodes.py's token limit.
WorkflowAgent react_agent(const std::string& name);

// An action word and the registered tool it calls. The tool gets the argument as the actor
// wrote it (the built-in lookup strips it, as run_episodes.py does; calc splits it).
struct ReactTool {
  std::string action;  // as the actor writes it: "Lookup"
  std::string tool;    // the ToolRegistry name: "lookup"
};

struct ReactSpec {
  std::string system = kReactSystemPrompt;  // empty: no system turn
  WorkflowAgent planner = react_agent("planner");
  WorkflowAgent actor = react_agent("actor");
  std::optional<WorkflowAgent> reflector = react_agent("reflector");  // reset() for none
  // Most planner+actor rounds. run_episodes.py's --max-rounds is 6 (the committed episodes
  // ran with it); pass 6 to reproduce them.
  int max_steps = 8;
  std::vector<ReactTool> tools = {{"Lookup", "lookup"}, {"Calculate", "calculator"}};
  std::string finish_action = "Finish";
};

// What run_episodes.py reports of an episode, beside the common result. `answer` is the
// stripped Finish argument; `steps` is its `rounds`: the round of the Finish, or max_steps
// when none came.
struct ReactResult : WorkflowResult {
  bool finished = false;  // the actor wrote Finish
  // The reflector's judgement as run_episodes.py reads it: "right", "wrong", "other:<its
  // first 20 characters>", or empty (no Finish, or no reflector).
  std::string verdict;
  // Every round's action is the one the planner named ("Action: Lookup"), and parses.
  bool planner_actor_consistent = true;
};

// Throws UnknownAgentError for an agent not in the session and ConfigError for a spec whose
// tools are not registered or whose max_steps is negative, before appending anything.
ReactResult run_react(Session& session, const ReactSpec& spec, const std::string& question, const ToolRegistry& tools,
                      const WorkflowObserver& observer = {});

// run_episodes.py's verdict of a reflector's text.
std::string react_verdict(const std::string& reflector_text);

}  // namespace lorakv::agents

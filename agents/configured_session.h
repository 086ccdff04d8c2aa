// agents/configured_session.h: a YAML session (agents/config/) made real over the public
// API: the runtime's and the session's options, the agents, the tools and the workflow run.
// `lorakv run` is this plus printing; orchestration code can do the same with its own
// observer.
//
//   const config::SessionConfig c = config::load_session_config("configs/react_qa.yaml");
//   Runtime rt(runtime_options(c));
//   auto session = open_configured_session(rt, c);   // adapters loaded, agents added
//   ToolRegistry tools = configured_tools(c);
//   ConfiguredRun run = run_configured_workflow(*session, c, tools, "Who is ...?", observer);
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "lorakv/agents/config/session_config.h"
#include "lorakv/agents/config_options.h"  // runtime_options, session_options, ...
#include "lorakv/agents/runtime.h"
#include "lorakv/agents/tools.h"
#include "lorakv/agents/workflow_react.h"
#include "lorakv/agents/workflow_types.h"

namespace lorakv::agents {

// Loads the config's adapters into `rt` (those not loaded yet) and opens a session with its
// agents. Errors of the engine (a mode that cannot serve an adapter) are rethrown as
// ConfigFileError at the agent's place in the YAML.
std::shared_ptr<Session> open_configured_session(Runtime& rt, const config::SessionConfig& c);

// The config's tools: lookup over its documents, calculator with its timeout.
ToolRegistry configured_tools(const config::SessionConfig& c);

struct ConfiguredRun {
  WorkflowResult result;
  std::optional<ReactResult> react;  // react workflows: finished, verdict, ...
};

// Runs the config's workflow once on `session` with `input` (the user's turn; the config's
// workflow.input when empty).
ConfiguredRun run_configured_workflow(Session& session, const config::SessionConfig& c, const ToolRegistry& tools,
                                      const std::string& input, const WorkflowObserver& observer = {});

}  // namespace lorakv::agents

// agents/observed_session.h: the bookkeeping every workflow shares, over the public Session
// API only: each turn appended, generated or produced by a tool through it is reported to
// the observer and recorded in the result. The built-in workflows are written with it, and
// a user's own workflow can be too (examples/custom_workflow.cpp).
#pragma once

#include <string>

#include "lorakv/agents/session.h"
#include "lorakv/agents/tools.h"
#include "lorakv/agents/workflow_types.h"

namespace lorakv::agents {

class ObservedSession {
 public:
  // Both must outlive this object.
  ObservedSession(Session& session, const WorkflowObserver& observer) : session_(session), observer_(observer) {}

  // A whole turn of text (system, user, tool...), as Session::append.
  void append(const std::string& role, const std::string& text, WorkflowTurn::Kind kind = WorkflowTurn::Kind::kPrompt);
  // The workflow's system turn, which opens a conversation: appended when `text` is not
  // empty and the trajectory is still empty. A workflow run again on the same session
  // (`lorakv run --interactive`, `lorakv chat`) keeps the one system turn it has.
  void append_system(const std::string& text);
  // The agent writes its turn with its options, streamed to the observer. A reply that was
  // not appended (cancelled, past its deadline) is no turn: it sets the result's
  // stopped_by instead; check `appended` before going on.
  Reply generate(const WorkflowAgent& agent);
  // Calls the tool and appends its output, whatever its status, as a `tool` turn.
  ToolResult call_tool(const ToolRegistry& tools, const std::string& tool, const std::string& argument);

  Session& session() { return session_; }
  WorkflowResult& result() { return result_; }

 private:
  Session& session_;
  const WorkflowObserver& observer_;
  WorkflowResult result_;
};

// Throws UnknownAgentError unless every agent is in the session (checked before a workflow
// appends anything, so a refused workflow leaves the session as it was).
void require_agents(const Session& session, const std::vector<WorkflowAgent>& agents);

}  // namespace lorakv::agents

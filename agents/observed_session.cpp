// agents/observed_session.cpp: observed and recorded turns; the transcript format.
#include "lorakv/agents/observed_session.h"

#include <algorithm>

#include "lorakv/agents/errors.h"

namespace lorakv::agents {
namespace {

// The agent's options with the observer's on_text in front of the agent's own.
GenerateOptions observed_options(const WorkflowAgent& agent, const WorkflowObserver& observer) {
  GenerateOptions options = agent.options;
  if (!observer.on_text) return options;
  auto own = options.on_text;
  options.on_text = [own, observe = observer.on_text, name = agent.name](const std::string& piece) {
    observe(name, piece);
    return own ? own(piece) : true;
  };
  return options;
}

}  // namespace

void ObservedSession::append(const std::string& role, const std::string& text, WorkflowTurn::Kind kind) {
  session_.append(role, text);
  WorkflowTurn turn;
  turn.kind = kind;
  turn.role = role;
  turn.text = text;
  result_.turns.push_back(std::move(turn));
  if (observer_.on_append) observer_.on_append(role, text);
}

void ObservedSession::append_system(const std::string& text) {
  if (!text.empty() && session_.stats().trajectory_tokens == 0) append("system", text);
}

Reply ObservedSession::generate(const WorkflowAgent& agent) {
  if (observer_.on_turn_start) observer_.on_turn_start(agent.name);
  Reply reply = session_.generate(agent.name, observed_options(agent, observer_));
  if (observer_.on_turn_end) observer_.on_turn_end(agent.name, reply);
  if (!reply.appended) {
    result_.stopped_by = agent.name + ": " + reply_end_name(reply.end);
    return reply;
  }
  WorkflowTurn turn;
  turn.kind = WorkflowTurn::Kind::kAgent;
  turn.role = agent.name;
  turn.text = reply.text;
  turn.reply = reply;
  result_.turns.push_back(std::move(turn));
  return reply;
}

ToolResult ObservedSession::call_tool(const ToolRegistry& tools, const std::string& tool, const std::string& argument) {
  if (observer_.on_tool_call) observer_.on_tool_call(tool, argument);
  const ToolResult result = tools.call(tool, argument);
  if (observer_.on_tool_result) observer_.on_tool_result(tool, result);
  append("tool", result.text, WorkflowTurn::Kind::kTool);
  result_.turns.back().tool = tool;
  result_.turns.back().tool_result = result;
  return result;
}

void require_agents(const Session& session, const std::vector<WorkflowAgent>& agents) {
  const std::vector<std::string> present = session.agents();
  for (const WorkflowAgent& agent : agents) {
    if (std::find(present.begin(), present.end(), agent.name) == present.end()) {
      throw UnknownAgentError("the workflow names an agent the session does not have",
                              {"", agent.name, "one of the session's agents", "", "add it with Session::add_agent"});
    }
  }
}

std::string transcript(const WorkflowResult& result) {
  std::string out;
  for (const WorkflowTurn& turn : result.turns) {
    if (turn.kind == WorkflowTurn::Kind::kPrompt) continue;
    if (!out.empty()) out += " | ";
    out += "[" + turn.role + "] " + turn.text;
  }
  return out;
}

std::vector<std::string> transcript_turns(const std::string& transcript) {
  std::vector<std::string> turns;
  size_t start = 0;
  for (size_t at = transcript.find(" | "); at != std::string::npos; at = transcript.find(" | ", start)) {
    turns.push_back(transcript.substr(start, at - start));
    start = at + 3;
  }
  turns.push_back(transcript.substr(start));
  return turns;
}

}  // namespace lorakv::agents

// agents/workflow_react.cpp: run_react, run_episodes.py's run_one over a Session.
#include "lorakv/agents/workflow_react.h"

#include "lorakv/agents/actions.h"
#include "lorakv/agents/observed_session.h"
#include "lorakv/agents/python_text.h"

namespace lorakv::agents {
namespace {

void check_spec(const Session& session, const ReactSpec& spec, const ToolRegistry& tools) {
  std::vector<WorkflowAgent> agents = {spec.planner, spec.actor};
  if (spec.reflector) agents.push_back(*spec.reflector);
  require_agents(session, agents);
  if (spec.max_steps < 0) throw ConfigError("max_steps must be 0 or more", {"", "max_steps"});
  if (spec.finish_action.empty()) throw ConfigError("the finish action needs a name", {"", "finish_action"});
  for (const ReactTool& t : spec.tools) {
    if (!tools.has(t.tool)) {
      throw ConfigError("a react action calls a tool that is not registered",
                        {"", t.action, "a tool of the registry", t.tool, "register it with ToolRegistry::add"});
    }
  }
}

// plan.rsplit("Action:", 1)[-1].strip() if "Action:" in plan else ""
std::string planned_action(const std::string& plan) {
  const size_t at = plan.rfind("Action:");
  return at == std::string::npos ? "" : python::strip(plan.substr(at + 7));
}

const std::string& tool_of(const ReactSpec& spec, const std::string& action) {
  for (const ReactTool& t : spec.tools) {
    if (t.action == action) return t.tool;
  }
  throw InternalError("parse_action returned an action the spec does not have: " + action);
}

std::vector<std::string> action_words(const ReactSpec& spec) {
  std::vector<std::string> words;
  for (const ReactTool& t : spec.tools) words.push_back(t.action);
  return words;
}

}  // namespace

WorkflowAgent react_agent(const std::string& name) {
  WorkflowAgent agent{name, {}};
  agent.options.max_tokens = kReactMaxNewTokens;
  return agent;
}

std::string react_verdict(const std::string& text) {
  std::string v = text;
  const size_t at = text.find("Verdict:");
  if (at != std::string::npos) {
    v = python::strip(text.substr(at + 8));
    while (!v.empty() && v.back() == '.') v.pop_back();
  }
  if (v == "right" || v == "wrong") return v;
  return "other:" + python::first_chars(v, 20);
}

ReactResult run_react(Session& session, const ReactSpec& spec, const std::string& question, const ToolRegistry& tools,
                      const WorkflowObserver& observer) {
  check_spec(session, spec, tools);
  ObservedSession s(session, observer);
  ReactResult out;
  s.append_system(spec.system);
  s.append("user", question);
  const std::vector<std::string> words = action_words(spec);
  for (int round = 1; round <= spec.max_steps; ++round) {
    s.result().steps = round;
    const Reply plan = s.generate(spec.planner);
    if (!plan.appended) break;
    const Reply act = s.generate(spec.actor);
    if (!act.appended) break;
    const Action action = parse_action(act.text, words, spec.finish_action);
    if (action.kind == Action::Kind::kInvalid) {
      out.planner_actor_consistent = false;
      s.append("tool", kUnknownActionText, WorkflowTurn::Kind::kTool);
      continue;
    }
    if (planned_action(plan.text) != action.name) out.planner_actor_consistent = false;
    if (action.kind == Action::Kind::kTool) {
      s.call_tool(tools, tool_of(spec, action.name), action.argument);
      continue;
    }
    s.result().answer = python::strip(action.argument);
    out.finished = true;
    if (spec.reflector) {
      const Reply reflection = s.generate(*spec.reflector);
      if (reflection.appended) out.verdict = react_verdict(reflection.text);
    }
    break;
  }
  static_cast<WorkflowResult&>(out) = std::move(s.result());
  return out;
}

}  // namespace lorakv::agents

// agents/configured_session.cpp: from the loaded YAML (agents/config/) to runtime options,
// a session with its agents, tools, and one workflow run.
#include "lorakv/agents/configured_session.h"

#include <cctype>

#include "lorakv/agents/builtin_tools.h"
#include "lorakv/agents/config_options.h"
#include "lorakv/agents/workflows.h"
#include "lorakv/common/errors.h"

namespace lorakv::agents {

namespace {

// The agent of a workflow: its name and generation settings from its section.
WorkflowAgent workflow_agent(const config::SessionConfig& c, const std::string& name, const std::string& key) {
  const config::AgentSection* a = c.find_agent(name);
  if (a == nullptr) throw c.error_at(key, "no agent " + name + " under `agents`");
  return {name, generate_options(*a)};
}

std::string capitalised(std::string name) {
  if (!name.empty()) name[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(name[0])));
  return name;
}

ReactSpec react_spec(const config::SessionConfig& c) {
  const config::WorkflowSection& w = c.workflow;
  ReactSpec spec;
  spec.system = w.system;
  spec.planner = workflow_agent(c, w.planner, "workflow.planner");
  spec.actor = workflow_agent(c, w.actor, "workflow.actor");
  spec.reflector.reset();
  if (!w.reflector.empty()) spec.reflector = workflow_agent(c, w.reflector, "workflow.reflector");
  spec.max_steps = static_cast<int>(w.max_steps);
  spec.tools.clear();
  std::vector<std::string> names = w.tools;
  if (names.empty()) {
    for (const config::ToolSection& t : c.tools) names.push_back(t.name);
  }
  for (const std::string& name : names) spec.tools.push_back({capitalised(name), name});  // lookup: Lookup[...]
  return spec;
}

PipelineSpec pipeline_spec(const config::SessionConfig& c) {
  PipelineSpec spec;
  spec.system = c.workflow.system;
  for (size_t i = 0; i < c.workflow.tasks.size(); ++i) {
    const config::TaskSection& t = c.workflow.tasks[i];
    spec.tasks.push_back({t.name, t.description, t.expected_output, t.agent, t.context});
    const bool listed = std::any_of(spec.agents.begin(), spec.agents.end(),
                                    [&](const WorkflowAgent& a) { return a.name == t.agent; });
    if (!listed) spec.agents.push_back(workflow_agent(c, t.agent, "workflow.tasks[" + std::to_string(i) + "].agent"));
  }
  return spec;
}

RoundRobinSpec round_robin_spec(const config::SessionConfig& c) {
  RoundRobinSpec spec;
  spec.system = c.workflow.system;
  spec.rounds = static_cast<int>(c.workflow.rounds);
  for (size_t i = 0; i < c.workflow.agents.size(); ++i) {
    spec.agents.push_back(workflow_agent(c, c.workflow.agents[i], "workflow.agents[" + std::to_string(i) + "]"));
  }
  return spec;
}

}  // namespace

std::shared_ptr<Session> open_configured_session(Runtime& rt, const config::SessionConfig& c) {
  const std::vector<std::string> loaded = rt.adapters();
  for (const config::AdapterSection& a : c.adapters) {
    if (std::find(loaded.begin(), loaded.end(), a.name) != loaded.end()) continue;
    try {
      rt.load_adapter(a.name, a.path);
    } catch (const InternalError&) {  // a bug stays one
      throw;
    } catch (const Error& e) {
      throw c.error_at("adapters." + a.name, e.what());
    }
  }
  std::shared_ptr<Session> session = rt.open_session(session_options(c));
  for (const config::AgentSection& a : c.agents) {
    try {
      session->add_agent(agent_options(a));
    } catch (const InternalError&) {  // a bug stays one
      throw;
    } catch (const Error& e) {
      throw c.error_at("agents." + a.name + ".adapter", e.what(), "choose another cache.mode, or another adapter");
    }
  }
  return session;
}

ToolRegistry configured_tools(const config::SessionConfig& c) {
  ToolRegistry tools;
  for (const config::ToolSection& t : c.tools) {
    Tool tool;
    if (t.type == "lookup") {
      auto store = std::make_shared<DocumentStore>();
      for (const config::LookupDocument& d : t.entries) store->add(d.name, d.text);
      tool = lookup_tool(store, t.name);
    } else {
      tool = calculator_tool(t.name);
      tool.deadline = std::chrono::milliseconds(t.timeout_ms);
    }
    if (!t.description.empty()) tool.description = t.description;
    tools.add(std::move(tool));
  }
  return tools;
}

ConfiguredRun run_configured_workflow(Session& session, const config::SessionConfig& c, const ToolRegistry& tools,
                                      const std::string& input, const WorkflowObserver& observer) {
  const std::string& text = input.empty() ? c.workflow.input : input;
  ConfiguredRun run;
  if (c.workflow.type == "react") {
    run.react = run_react(session, react_spec(c), text, tools, observer);
    run.result = *run.react;
  } else if (c.workflow.type == "pipeline") {
    run.result = run_pipeline(session, pipeline_spec(c), text, observer);
  } else if (c.workflow.type == "round_robin") {
    run.result = run_round_robin(session, round_robin_spec(c), text, observer);
  } else {
    throw c.error_at("workflow.type", "unknown workflow type " + c.workflow.type);
  }
  return run;
}

}  // namespace lorakv::agents

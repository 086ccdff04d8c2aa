// agents/workflow_pipeline.cpp: run_pipeline, tasks in order on one trajectory.
#include <algorithm>
#include <set>

#include "lorakv/agents/observed_session.h"
#include "lorakv/agents/workflows.h"

namespace lorakv::agents {
namespace {

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

const WorkflowAgent& agent_of(const PipelineSpec& spec, const PipelineTask& task) {
  for (const WorkflowAgent& agent : spec.agents) {
    if (agent.name == task.agent) return agent;
  }
  throw ConfigError("a task names an agent the pipeline does not list",
                    {"", task.name.empty() ? task.description : task.name, "one of spec.agents", task.agent});
}

void check_spec(const Session& session, const PipelineSpec& spec) {
  require_agents(session, spec.agents);
  std::set<std::string> earlier;
  for (const PipelineTask& task : spec.tasks) {
    agent_of(spec, task);
    for (const std::string& name : task.context) {
      if (earlier.count(name) == 0) {
        throw ConfigError("a task's context must name an earlier task",
                          {"", task.name, "an earlier task's name", name});
      }
    }
    if (task.name.empty()) continue;
    if (!earlier.insert(task.name).second) throw ConfigError("two tasks have the same name", {"", task.name});
  }
}

// Whether some task's text takes the input through `{input}`.
bool names_input(const PipelineSpec& spec) {
  return std::any_of(spec.tasks.begin(), spec.tasks.end(), [](const PipelineTask& t) {
    return t.description.find("{input}") != std::string::npos || t.expected_output.find("{input}") != std::string::npos;
  });
}

}  // namespace

std::string task_prompt(const PipelineTask& task, const std::string& input) {
  std::string prompt = replace_all(task.description, "{input}", input);
  if (!task.expected_output.empty()) {
    prompt += "\nExpected output: " + replace_all(task.expected_output, "{input}", input);
  }
  return prompt;
}

WorkflowResult run_pipeline(Session& session, const PipelineSpec& spec, const std::string& input,
                            const WorkflowObserver& observer) {
  check_spec(session, spec);
  ObservedSession s(session, observer);
  s.append_system(spec.system);
  // A pipeline whose tasks do not place the input gets it as a user turn of its own, first.
  if (!input.empty() && !names_input(spec)) s.append("user", input);
  for (const PipelineTask& task : spec.tasks) {
    s.append("user", task_prompt(task, input));
    const Reply reply = s.generate(agent_of(spec, task));
    if (!reply.appended) break;
    s.result().answer = reply.text;
    ++s.result().steps;
  }
  return std::move(s.result());
}

}  // namespace lorakv::agents

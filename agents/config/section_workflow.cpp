// agents/config/section_workflow.cpp: the `workflow` key: react (planner, actor, tools,
// reflector), round_robin (agents in turn) or pipeline (CrewAI-style tasks).
#include <algorithm>
#include <set>

#include "lorakv/agents/config/sections.h"

namespace lorakv::agents::config {
namespace {

const std::vector<std::string> kCommonKeys = {"type", "system", "input"};
const std::vector<std::string> kReactKeys = {"planner", "actor", "reflector", "max_steps", "tools"};
const std::vector<std::string> kRoundRobinKeys = {"agents", "rounds"};
const std::vector<std::string> kPipelineKeys = {"tasks"};
const std::vector<std::string> kTaskKeys = {"name", "description", "expected_output", "agent", "context"};

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

template <typename T>
std::vector<std::string> names_of(const std::vector<T>& items) {
  std::vector<std::string> names;
  for (const T& item : items) names.push_back(item.name);
  return names;
}

std::string read_agent_name(const ConfigReader& r, const Field& f, const SessionConfig& config) {
  const std::string name = read_text(r, f);
  require_known_name(r, f, name, names_of(config.agents), "agent", "agents");
  return name;
}

// A list of distinct names, each one of `known`.
std::vector<std::string> read_name_list(const ConfigReader& r, const Field& f, const std::vector<std::string>& known,
                                        const std::string& kind, const std::string& section) {
  const std::vector<std::string> names = read_text_list(r, f, true);
  for (size_t i = 0; i < names.size(); ++i) {
    const Field item{f.node.items[i], item_path(f.path, i)};
    require_known_name(r, item, names[i], known, kind, section);
    const auto end = names.begin() + static_cast<std::ptrdiff_t>(i);
    if (std::find(names.begin(), end, names[i]) != end) {
      r.fail(item.node.mark, item.path, "`" + f.path + "` names `" + names[i] + "` twice");
    }
  }
  return names;
}

void read_react(const ConfigReader& r, const MapReader& map, SessionConfig& config) {
  WorkflowSection& w = config.workflow;
  w.planner = read_agent_name(r, map.get("planner", "the agent that thinks and picks the action"), config);
  w.actor = read_agent_name(r, map.get("actor", "the agent that writes the action, e.g. Lookup[Dok Gramein]"), config);
  if (map.has("reflector")) w.reflector = read_agent_name(r, map.get("reflector"), config);
  if (map.has("max_steps")) w.max_steps = read_int(r, map.get("max_steps"), 1, 10000, "planner-actor-tool rounds");
  const std::vector<std::string> tools = names_of(config.tools);
  w.tools = map.has("tools") ? read_name_list(r, map.get("tools"), tools, "tool", "tools") : tools;
}

void read_round_robin(const ConfigReader& r, const MapReader& map, SessionConfig& config) {
  WorkflowSection& w = config.workflow;
  w.agents = read_name_list(r, map.get("agents", "agents: [writer, critic], who speaks in turn"),
                            names_of(config.agents), "agent", "agents");
  if (w.agents.empty()) r.fail(map.get("agents").node.mark, map.path("agents"), "`workflow.agents` is empty");
  if (map.has("rounds")) w.rounds = read_int(r, map.get("rounds"), 1, 10000, "each agent speaks once per round");
}

// The names the tasks are written with (those that have one), to tell a later task from
// an unknown one.
std::vector<std::string> written_task_names(const YamlNode& tasks) {
  std::vector<std::string> names;
  for (const YamlNode& task : tasks.items) {
    for (const YamlEntry& entry : task.entries) {
      if (entry.key == "name" && entry.value.kind == YamlNode::Kind::kScalar) names.push_back(entry.value.scalar);
    }
  }
  return names;
}

void read_context(const ConfigReader& r, const Field& context, const std::vector<std::string>& all_tasks,
                  const SessionConfig& config, TaskSection& task) {
  const std::vector<std::string> earlier = names_of(config.workflow.tasks);
  task.context = read_text_list(r, context, true);
  for (size_t i = 0; i < task.context.size(); ++i) {
    const std::string& name = task.context[i];
    const Field item{context.node.items[i], item_path(context.path, i)};
    if (std::find(earlier.begin(), earlier.end(), name) != earlier.end()) continue;
    if (name == task.name || std::find(all_tasks.begin(), all_tasks.end(), name) != all_tasks.end()) {
      r.fail(item.node.mark, item.path,
             "`" + item.path + "` names the task `" + name + "`, which " +
                 (name == task.name ? "is this task itself" : "comes later"),
             "a task reads the outputs of the tasks before it only; reorder the tasks");
    }
    require_known_name(r, item, name, earlier, "task", "workflow.tasks");
  }
}

TaskSection read_task(const ConfigReader& r, const Field& f, const std::vector<std::string>& all_tasks,
                      const SessionConfig& config) {
  const MapReader map(r, f, kTaskKeys);
  TaskSection task;
  const Field name = map.get("name", "a task's name, which later tasks' context names");
  task.name = read_text(r, name);
  require_one_line_name(r, name.node.mark, name.path, task.name);
  const std::vector<std::string> earlier = names_of(config.workflow.tasks);
  if (std::find(earlier.begin(), earlier.end(), task.name) != earlier.end()) {
    r.fail(name.node.mark, name.path, "two tasks are named `" + task.name + "`", "task names are unique");
  }
  task.description = read_text(r, map.get("description", "what the agent is to do"));
  if (map.has("expected_output")) task.expected_output = read_text(r, map.get("expected_output"));
  task.agent = read_agent_name(r, map.get("agent", "the agent that does the task"), config);
  if (map.has("context")) read_context(r, map.get("context"), all_tasks, config, task);
  return task;
}

void read_pipeline(const ConfigReader& r, const MapReader& map, SessionConfig& config) {
  const Field tasks = map.get("tasks", "tasks: [{name, description, expected_output, agent, context}]");
  if (tasks.node.kind != YamlNode::Kind::kSequence || tasks.node.items.empty()) {
    r.fail(tasks.node.mark, tasks.path, "`workflow.tasks` must be a list of at least one task",
           "tasks: [{name: research, description: ..., agent: researcher}]");
  }
  require_at_most(r, tasks, tasks.node.items.size(), kMaxEntries, "tasks");
  const std::vector<std::string> all_tasks = written_task_names(tasks.node);
  for (size_t i = 0; i < tasks.node.items.size(); ++i) {
    const Field item{tasks.node.items[i], item_path(tasks.path, i)};
    r.marks().set(item.path, item.node.mark);
    config.workflow.tasks.push_back(read_task(r, item, all_tasks, config));
  }
}

}  // namespace

void read_workflow_section(const ConfigReader& r, const MapReader& top, SessionConfig& config) {
  const Field field = top.get("workflow", "workflow: {type: react, planner: ..., actor: ...}");
  const MapReader any(r, field, plus(plus(plus(kCommonKeys, kReactKeys), kRoundRobinKeys), kPipelineKeys));
  WorkflowSection& w = config.workflow;
  w.type = read_choice(r, any.get("type", "type: react, pipeline or round_robin"), workflow_type_names());
  const std::vector<std::string>& own =
      w.type == "react" ? kReactKeys : w.type == "round_robin" ? kRoundRobinKeys : kPipelineKeys;
  const MapReader map(r, field, plus(kCommonKeys, own));
  if (map.has("system")) w.system = read_text(r, map.get("system"));
  if (map.has("input")) w.input = read_text(r, map.get("input"));
  if (w.type == "react") read_react(r, map, config);
  if (w.type == "round_robin") read_round_robin(r, map, config);
  if (w.type == "pipeline") read_pipeline(r, map, config);
}

}  // namespace lorakv::agents::config

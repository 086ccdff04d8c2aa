// agents/config/section_agents.cpp: the `agents` key: each agent's turn name, adapter,
// private instruction (or CrewAI's role, goal, backstory) and generation options.
#include <algorithm>

#include "lorakv/agents/config/sections.h"

namespace lorakv::agents::config {
namespace {

const std::vector<std::string> kAgentKeys = {"adapter",    "instruction", "role", "goal",
                                             "backstory",  "max_tokens",  "sampling", "stop", "allowed_prefixes"};
const std::vector<std::string> kSamplingKeys = {"temperature", "top_k", "top_p", "repetition_penalty", "seed"};

// The turn names the trajectory uses for its own turns.
const std::vector<std::string> kReservedTurnNames = {"system", "user", "tool"};

void check_turn_name(const ConfigReader& r, const YamlEntry& entry, const std::string& path) {
  require_one_line_name(r, entry.key_mark, path, entry.key);
  if (std::find(kReservedTurnNames.begin(), kReservedTurnNames.end(), entry.key) != kReservedTurnNames.end()) {
    r.fail(entry.key_mark, path, "`" + entry.key + "` is the trajectory's own turn name, not an agent's",
           "name the agent after the role its adapter was trained on, e.g. planner");
  }
  if (entry.key.find("<|") != std::string::npos) {
    r.fail(entry.key_mark, path, "the turn name `" + entry.key + "` holds a special token's text",
           "a turn name is the ChatML role, plain text like planner");
  }
}

void read_sampling(const ConfigReader& r, const Field& f, SamplingSection& s) {
  const MapReader sampling(r, f, kSamplingKeys);
  if (sampling.has("temperature")) {
    s.temperature = read_number(r, sampling.get("temperature"), 0, 1e6, false, ">= 0; 0 is greedy");
  }
  if (sampling.has("top_k")) s.top_k = read_int(r, sampling.get("top_k"), 0, int64_t{1} << 31, "0 keeps every token");
  if (sampling.has("top_p")) s.top_p = read_number(r, sampling.get("top_p"), 0, 1, true, "in (0, 1]; 1 keeps every token");
  if (sampling.has("repetition_penalty")) {
    s.repetition_penalty = read_number(r, sampling.get("repetition_penalty"), 0, 1e6, true, "> 0; 1 is off");
  }
  if (sampling.has("seed")) s.seed = read_uint64(r, sampling.get("seed"));
}

void read_instruction(const ConfigReader& r, const MapReader& map, AgentSection& agent) {
  if (map.has("instruction")) agent.instruction = read_text(r, map.get("instruction"));
  if (map.has("role")) agent.role = read_text(r, map.get("role"));
  if (map.has("goal")) agent.goal = read_text(r, map.get("goal"));
  if (map.has("backstory")) agent.backstory = read_text(r, map.get("backstory"));
  const bool crew_style = !agent.role.empty() || !agent.goal.empty() || !agent.backstory.empty();
  if (!agent.instruction.empty() && crew_style) {
    const Field f = map.get("instruction");
    r.fail(f.node.mark, f.path, "`" + f.path + "` is given together with role/goal/backstory",
           "write the private instruction one way: `instruction`, or role, goal and backstory (they form "
           "\"You are {role}. {backstory}\\nYour personal goal is: {goal}\")");
  }
}

AgentSection read_agent(const ConfigReader& r, const YamlEntry& entry, const std::string& path,
                        const SessionConfig& config) {
  AgentSection agent;
  agent.name = entry.key;
  if (entry.value.kind == YamlNode::Kind::kNull) return agent;  // `critic:` alone: the base model, defaults
  const MapReader map(r, Field{entry.value, path}, kAgentKeys);
  if (map.has("adapter")) {
    const Field f = map.get("adapter");
    agent.adapter = read_text(r, f);
    std::vector<std::string> names;
    for (const AdapterSection& a : config.adapters) names.push_back(a.name);
    require_known_name(r, f, agent.adapter, names, "adapter", "adapters");
  }
  read_instruction(r, map, agent);
  if (map.has("max_tokens")) {
    agent.max_tokens = read_int(r, map.get("max_tokens"), 1, int64_t{1} << 20, "the most tokens of one reply");
  }
  if (map.has("sampling")) read_sampling(r, map.get("sampling"), agent.sampling);
  if (map.has("stop")) agent.stop = read_text_list(r, map.get("stop"), true);
  if (map.has("allowed_prefixes")) agent.allowed_prefixes = read_text_list(r, map.get("allowed_prefixes"), true);
  return agent;
}

}  // namespace

void read_agents_section(const ConfigReader& r, const MapReader& top, SessionConfig& config) {
  const Field agents = top.get("agents", "agents: {planner: {adapter: planner}} (keyed by turn name)");
  if (agents.node.kind != YamlNode::Kind::kMap || agents.node.entries.empty()) {
    r.fail(agents.node.mark, "agents", "`agents` must be a map of turn name: agent, with at least one agent",
           "agents: {planner: {adapter: planner}}");
  }
  require_at_most(r, agents, agents.node.entries.size(), kMaxEntries, "agents");
  for (const YamlEntry& entry : agents.node.entries) {
    const std::string path = child_path("agents", entry.key);
    r.marks().set(path, entry.key_mark);
    check_turn_name(r, entry, path);
    config.agents.push_back(read_agent(r, entry, path, config));
  }
}

}  // namespace lorakv::agents::config

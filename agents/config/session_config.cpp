// agents/config/session_config.cpp: the config's lookups, name lists and the agents'
// private instruction.
#include "lorakv/agents/config/session_config.h"

#include <algorithm>

namespace lorakv::agents::config {

SourceMark ConfigMarks::at(const std::string& key_path) const {
  std::string path = key_path;
  while (!path.empty()) {
    auto it = marks_.find(path);
    if (it != marks_.end()) return it->second;
    const size_t cut = path.find_last_of(".[");
    if (cut == std::string::npos) break;
    path.resize(cut);
  }
  return {};
}

const std::vector<std::string>& cache_mode_names() {
  static const std::vector<std::string> names = {"full", "full_shared", "base_shared", "base_lr_shared"};
  return names;
}

const std::vector<std::string>& cache_writer_names() {
  static const std::vector<std::string> names = {"first", "base", "author"};
  return names;
}

const std::vector<std::string>& tool_type_names() {
  static const std::vector<std::string> names = {"lookup", "calculator"};
  return names;
}

const std::vector<std::string>& workflow_type_names() {
  static const std::vector<std::string> names = {"react", "pipeline", "round_robin"};
  return names;
}

std::string AgentSection::private_instruction() const {
  if (!instruction.empty()) return instruction;
  std::string text;
  if (!role.empty()) text = "You are " + role + ".";
  if (!backstory.empty()) text += (text.empty() ? "" : " ") + backstory;
  if (!goal.empty()) text += (text.empty() ? "" : "\n") + std::string("Your personal goal is: ") + goal;
  return text;
}

namespace {

template <typename T>
const T* find_named(const std::vector<T>& items, const std::string& name) {
  auto it = std::find_if(items.begin(), items.end(), [&](const T& item) { return item.name == name; });
  return it == items.end() ? nullptr : &*it;
}

}  // namespace

const AdapterSection* SessionConfig::find_adapter(const std::string& name) const { return find_named(adapters, name); }
const AgentSection* SessionConfig::find_agent(const std::string& name) const { return find_named(agents, name); }
const ToolSection* SessionConfig::find_tool(const std::string& name) const { return find_named(tools, name); }

ConfigFileError SessionConfig::error_at(const std::string& key_path, const std::string& message,
                                        const std::string& hint) const {
  return ConfigFileError(source, marks.at(key_path), key_path, message, hint);
}

}  // namespace lorakv::agents::config

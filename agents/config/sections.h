// agents/config/sections.h: the readers of the config's top-level keys, called by the
// loader in dependency order (a reference is checked against what was read before it:
// adapters before agents, agents and tools before the workflow).
#pragma once

#include "lorakv/agents/config/config_reader.h"
#include "lorakv/agents/config/session_config.h"

namespace lorakv::agents::config {

void read_model_section(const ConfigReader& r, const MapReader& top, SessionConfig& config);
void read_adapters_section(const ConfigReader& r, const MapReader& top, SessionConfig& config);
void read_cache_section(const ConfigReader& r, const MapReader& top, SessionConfig& config);
void read_agents_section(const ConfigReader& r, const MapReader& top, SessionConfig& config);
void read_tools_section(const ConfigReader& r, const MapReader& top, SessionConfig& config);
void read_workflow_section(const ConfigReader& r, const MapReader& top, SessionConfig& config);
void read_output_section(const ConfigReader& r, const MapReader& top, SessionConfig& config);

// Refuses `name` when `known` does not hold it: "`workflow.planner` names the agent
// `plnner`, which `agents` does not define; did you mean `planner`?".
void require_known_name(const ConfigReader& r, const Field& f, const std::string& name,
                        const std::vector<std::string>& known, const std::string& kind, const std::string& section);
// Refuses a name that is empty, has spaces at its ends or a control character.
void require_one_line_name(const ConfigReader& r, SourceMark mark, const std::string& path, const std::string& name);

}  // namespace lorakv::agents::config

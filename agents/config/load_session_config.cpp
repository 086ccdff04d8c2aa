// agents/config/load_session_config.cpp: one load: bytes checked, YAML parsed into a
// tree under limits, then every section read against the schema, in dependency order.
#include "lorakv/agents/config/load_session_config.h"

#include "lorakv/agents/config/config_reader.h"
#include "lorakv/agents/config/paths.h"
#include "lorakv/agents/config/sections.h"
#include "lorakv/agents/config/source_text.h"
#include "lorakv/agents/config/yaml_tree.h"

namespace lorakv::agents::config {
namespace {

const std::vector<std::string> kTopKeys = {"model", "adapters", "cache", "agents", "tools", "workflow", "output"};

SessionConfig load(const SourceText& source, const std::string& base_dir) {
  const YamlNode root = parse_yaml(source);
  SessionConfig config;
  config.source = source.name();
  config.base_dir = base_dir;
  const ConfigReader r(source.name(), base_dir, config.marks);
  if (root.kind != YamlNode::Kind::kMap) {
    r.fail(root.mark, "", std::string("the file must be a YAML map of model, agents, workflow...; found ") + root.kind_name(),
           "see configs/README.md for the keys");
  }
  const MapReader top(r, Field{root, ""}, kTopKeys);
  read_model_section(r, top, config);
  read_adapters_section(r, top, config);
  read_cache_section(r, top, config);
  read_agents_section(r, top, config);
  read_tools_section(r, top, config);
  read_workflow_section(r, top, config);
  read_output_section(r, top, config);
  return config;
}

}  // namespace

SessionConfig load_session_config(const std::string& path) {
  const SourceText source(read_config_bytes(path), path);
  return load(source, config_base_dir_of_file(path));
}

SessionConfig load_session_config_from_string(const std::string& text, const std::string& virtual_name,
                                               const std::string& base_dir) {
  const SourceText source(text, virtual_name);
  return load(source, config_base_dir(base_dir));
}

}  // namespace lorakv::agents::config

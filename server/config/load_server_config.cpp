// server/config/load_server_config.cpp: the server's YAML: the runtime's sections through
// the session loader's readers, then `server`.
#include "lorakv/agents/config/config_reader.h"
#include "lorakv/agents/config/paths.h"
#include "lorakv/agents/config/sections.h"
#include "lorakv/agents/config/source_text.h"
#include "lorakv/agents/config/yaml_tree.h"
#include "lorakv/server/config/server_config.h"

namespace lorakv::server::config {
using namespace lorakv::agents::config;
namespace {

const std::vector<std::string> kTopKeys = {"model", "adapters", "cache", "server"};
const std::vector<std::string> kServerKeys = {
    "host", "port", "api_key", "model_name", "metrics", "max_body_bytes", "max_prompt_tokens", "max_tokens", "max_n",
    "max_running_requests", "max_waiting_requests", "max_queue_wait_s", "request_timeout_s", "shutdown_grace_s"};

std::chrono::seconds read_seconds(const ConfigReader& r, const Field& f, int64_t min, const std::string& meaning) {
  return std::chrono::seconds(read_int(r, f, min, int64_t{7} * 24 * 3600, meaning));
}

void read_server_section(const ConfigReader& r, const MapReader& top, ServerSettings& s) {
  const YamlNode* node = top.find("server");
  if (node == nullptr) return;
  const MapReader m(r, Field{*node, "server"}, kServerKeys);
  if (m.has("host")) {
    s.host = read_text(r, m.get("host"));
    require_one_line_name(r, m.get("host").node.mark, "server.host", s.host);
  }
  if (m.has("port")) s.port = static_cast<int>(read_int(r, m.get("port"), 0, 65535, "0: any free port"));
  if (m.has("api_key")) s.api_key = read_text(r, m.get("api_key"));
  if (m.has("model_name")) {
    s.model_name = read_text(r, m.get("model_name"));
    require_one_line_name(r, m.get("model_name").node.mark, "server.model_name", s.model_name);
  }
  if (m.has("metrics")) s.metrics = read_choice(r, m.get("metrics"), {"true", "false"}) == "true";
  ServerLimits& l = s.limits;
  if (m.has("max_body_bytes")) l.max_body_bytes = read_byte_size(r, m.get("max_body_bytes"));
  if (m.has("max_prompt_tokens")) l.max_prompt_tokens = read_int(r, m.get("max_prompt_tokens"), 0, int64_t{1} << 30, "0: the model's context");
  if (m.has("max_tokens")) l.max_tokens = read_int(r, m.get("max_tokens"), 1, int64_t{1} << 30);
  if (m.has("max_n")) l.max_n = read_int(r, m.get("max_n"), 1, 16, "replies per request");
  if (m.has("max_running_requests")) l.max_running_requests = read_int(r, m.get("max_running_requests"), 1, 4096);
  if (m.has("max_waiting_requests")) l.max_waiting_requests = read_int(r, m.get("max_waiting_requests"), 1, 1 << 20);
  if (m.has("max_queue_wait_s")) l.max_queue_wait = read_seconds(r, m.get("max_queue_wait_s"), 0, "0: no limit");
  if (m.has("request_timeout_s")) l.request_timeout = read_seconds(r, m.get("request_timeout_s"), 0, "0: none");
  if (m.has("shutdown_grace_s")) s.shutdown_grace = read_seconds(r, m.get("shutdown_grace_s"), 0, "seconds");
}

ServerConfig load(const SourceText& source, const std::string& base_dir) {
  const YamlNode root = parse_yaml(source);
  ServerConfig config;
  SessionConfig& c = config.runtime;
  c.source = source.name();
  c.base_dir = base_dir;
  const ConfigReader r(source.name(), base_dir, c.marks);
  if (root.kind != YamlNode::Kind::kMap) {
    r.fail(root.mark, "", std::string("the file must be a YAML map of model, adapters, cache, server; found ") +
                              root.kind_name(), "see configs/README.md, \"Serving\"");
  }
  const MapReader top(r, Field{root, ""}, kTopKeys);
  read_model_section(r, top, c);
  read_adapters_section(r, top, c);
  read_cache_section(r, top, c);
  read_server_section(r, top, config.server);
  return config;
}

}  // namespace

ServerConfig load_server_config(const std::string& path) {
  const SourceText source(read_config_bytes(path), path);
  return load(source, config_base_dir_of_file(path));
}

ServerConfig load_server_config_from_string(const std::string& text, const std::string& virtual_name,
                                            const std::string& base_dir) {
  const SourceText source(text, virtual_name);
  return load(source, config_base_dir(base_dir));
}

}  // namespace lorakv::server::config

// server/config/server_config.h: `lorakv serve --config FILE.yaml`: the session schema's
// `model`, `adapters` and `cache` keys (configs/README.md), read by the same readers, plus
// a `server` group for the server's own keys. Refusals are ConfigFileErrors at
// file:line:col with the key path and a hint, as for session files.
#pragma once

#include <string>

#include "lorakv/agents/config/session_config.h"
#include "lorakv/server/config/server_settings.h"

namespace lorakv::server::config {

struct ServerConfig {
  agents::config::SessionConfig runtime;  // model, adapters, cache (no agents, no workflow)
  ServerSettings server;
};

ServerConfig load_server_config(const std::string& path);
ServerConfig load_server_config_from_string(const std::string& text, const std::string& virtual_name,
                                            const std::string& base_dir);

}  // namespace lorakv::server::config

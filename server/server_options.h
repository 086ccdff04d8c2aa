// server/server_options.h: what an OpenAiServer is told: its settings (server/config/:
// where it listens, who may call it, its limits; every default there) and how requests
// share rows: the cache mode and writer of every request's session, whose rows later
// requests find again through the prefix index (docs/serving.md, "What is shared").
#pragma once

#include "lorakv/agents/session_types.h"
#include "lorakv/server/config/server_settings.h"

namespace lorakv::server {

using config::ServerLimits;

struct ServerOptions : config::ServerSettings {
  agents::SessionOptions sharing;
};

}  // namespace lorakv::server

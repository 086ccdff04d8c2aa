// server/metrics.h: GET /metrics in Prometheus' text format (opt-in): requests running and
// waiting, prompt, cached and generated tokens, KV bytes by component, engine steps and
// their host time, as llama.cpp's and vLLM's servers report.
#pragma once

#include <string>

#include "lorakv/server/server_state.h"

namespace lorakv::server {

std::string metrics_text(ServerState& state);

}  // namespace lorakv::server

// agents/config_options.h: a session config (lorakv/agents/config/) turned into the sessions
// API's options: what `lorakv run` passes to Runtime, open_session, add_agent and generate.
// The config's defaults equal these structs' (tests/agents/config/model/ compares them).
#pragma once

#include "lorakv/agents/config/session_config.h"
#include "lorakv/agents/session_types.h"

namespace lorakv::agents {

RuntimeOptions runtime_options(const config::SessionConfig& config);
SessionOptions session_options(const config::SessionConfig& config);  // mode and writer
AgentOptions agent_options(const config::AgentSection& agent);        // instruction: private_instruction()
// max_tokens, sampling, stop, allowed_prefixes; on_text, timeout and logprobs are the caller's.
GenerateOptions generate_options(const config::AgentSection& agent);

}  // namespace lorakv::agents

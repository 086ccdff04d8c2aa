// agents/alora_turn.h: an activated LoRA (aLoRA) agent's turn must invoke its adapter. A
// session runs an agent's instruction turn (if any) and its header "<|im_start|>{name}\n"
// privately before its reply; the engine adapts from the last occurrence of the adapter's
// invocation tokens in that private prompt on and refuses a turn without them
// (docs/sharing_modes.md, "Activated LoRA"). Checked when the agent joins and, for YAML
// sessions, before the model's weights load.
#pragma once

#include <string>

#include "lorakv/adapters/adapter.h"
#include "lorakv/agents/chat_layout.h"

namespace lorakv::agents {

// Throws ConfigError (the adapter's file, the agent, its invocation and its header as text)
// when `adapter` is an aLoRA whose invocation tokens are not in the agent's private prompt.
void check_turn_invokes(const ChatLayout& layout, const std::string& agent, const std::string& instruction,
                        const adapters::Adapter& adapter);

}  // namespace lorakv::agents

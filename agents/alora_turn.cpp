// agents/alora_turn.cpp: an aLoRA agent's private prompt holds its invocation tokens.
#include "lorakv/agents/alora_turn.h"

#include <vector>

#include "lorakv/common/errors.h"

namespace lorakv::agents {

namespace {

// Text for a message: in quotes, newlines shown as \n.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char ch : text) out += ch == '\n' ? std::string("\\n") : std::string(1, ch);
  return out + "'";
}

}  // namespace

void check_turn_invokes(const ChatLayout& layout, const std::string& agent, const std::string& instruction,
                        const adapters::Adapter& adapter) {
  if (!adapter.activated()) return;
  std::vector<int32_t> prompt;
  if (!instruction.empty()) prompt = layout.turn("system", instruction);
  const std::vector<int32_t> header = layout.header(agent);
  prompt.insert(prompt.end(), header.begin(), header.end());
  if (adapter.find_invocation(prompt) >= 0) return;
  const formats::BpeTokenizer& tok = layout.tokenizer();
  throw ConfigError("agent '" + agent + "' uses an activated LoRA whose invocation tokens are not in its turn",
                    {adapter.invocation_tokens_file(), agent, "the invocation " + quoted(tok.decode(adapter.invocation_tokens())),
                     "the turn header " + quoted(tok.decode(header)), "name the agent by the turn the adapter was trained on"});
}

}  // namespace lorakv::agents

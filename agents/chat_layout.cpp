// agents/chat_layout.cpp: ChatML turns as token ids.
#include "lorakv/agents/chat_layout.h"

#include <optional>

#include "lorakv/common/errors.h"

namespace lorakv::agents {

namespace {

int32_t required_token(const formats::BpeTokenizer& tokenizer, const std::string& text) {
  const std::optional<int32_t> id = tokenizer.token_id(text);
  if (!id) {
    throw ConfigError("the model's vocabulary has no " + text + " token",
                      {"", text, "a ChatML vocabulary", "", "sessions use the ChatML layout; use a ChatML model"});
  }
  return *id;
}

}  // namespace

ChatLayout::ChatLayout(const formats::BpeTokenizer& tokenizer)
    : tokenizer_(tokenizer), end_id_(required_token(tokenizer, "<|im_end|>")), newline_(tokenizer.encode("\n")) {
  required_token(tokenizer, "<|im_start|>");  // header() writes it as text; it must be one token
}

std::vector<int32_t> ChatLayout::header(const std::string& role) const {
  if (role.empty() || role.find_first_of("\r\n") != std::string::npos || role.find("<|") != std::string::npos) {
    throw ConfigError("a turn name must be one line of plain text", {"", "role", "e.g. planner", role, ""});
  }
  return tokenizer_.encode("<|im_start|>" + role + "\n");
}

std::vector<int32_t> ChatLayout::turn(const std::string& role, const std::string& text) const {
  std::vector<int32_t> ids = header(role);
  // The text is content, never layout: "<|im_end|>" written in it is spelled with ordinary
  // tokens, so a message cannot close its turn or open another (only the API writes roles).
  tokenizer_.encode(text, /*parse_special=*/false, ids);
  ids.push_back(end_id_);
  ids.insert(ids.end(), newline_.begin(), newline_.end());
  return ids;
}

}  // namespace lorakv::agents

// formats/chat_template.cpp: ChatML detection and rendering.
#include "formats/chat_template.h"

#include "common/errors.h"

namespace lorakv::formats {
namespace {

// SmolLM2's template inserts "<|im_start|>system\n<default text><|im_end|>\n" when the
// first message is not a system turn; the default text sits in the template source.
std::string extract_default_system(const std::string& jinja) {
  const std::string open = "<|im_start|>system\n";
  size_t at = jinja.find(open);
  if (at == std::string::npos) return "";
  at += open.size();
  const size_t end = jinja.find("<|im_end|>", at);
  if (end == std::string::npos) return "";
  std::string text = jinja.substr(at, end - at);
  // Only a literal default: a template that inserts message['content'] here has none.
  if (text.find('{') != std::string::npos || text.find('\'') != std::string::npos) return "";
  return text;
}

}  // namespace

ChatTemplate ChatTemplate::from_jinja(const std::string& jinja) {
  if (jinja.find("<|im_start|>") != std::string::npos && jinja.find("<|im_end|>") != std::string::npos) {
    ChatTemplate t;
    t.format_ = Format::kChatML;
    t.default_system_ = extract_default_system(jinja);
    return t;
  }
  throw ConfigError("unrecognised chat template",
                    {"", "tokenizer.chat_template", "a ChatML template", jinja.empty() ? "none" : jinja.substr(0, 60) + "...",
                     "choose a known format by name: chatml"});
}

ChatTemplate ChatTemplate::by_name(const std::string& name) {
  if (name == "chatml") return ChatTemplate{};
  throw ConfigError("unknown chat format", {"", "", "one of: chatml", "'" + name + "'", ""});
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out;
  if (!default_system_.empty() && (messages.empty() || messages.front().role != "system")) {
    out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
  }
  for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string ChatTemplate::end_of_turn() const { return "<|im_end|>"; }

}  // namespace lorakv::formats

// formats/chat_template.cpp: chat format detection and rendering (ChatML, Llama 3).
#include "lorakv/formats/chat_template.h"

#include "lorakv/common/errors.h"

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

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Jinja's `trim` filter: Python's str.strip(), which strips Unicode whitespace; ASCII
// whitespace covers what chat content holds in practice.
std::string trim(const std::string& s) {
  const char* space = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

std::string known_list() {
  std::string out;
  for (const auto& n : ChatTemplate::known_names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

const std::vector<std::string>& ChatTemplate::known_names() {
  static const std::vector<std::string> names = {"chatml", "llama3"};
  return names;
}

const char* ChatTemplate::name() const { return format_ == Format::kLlama3 ? "llama3" : "chatml"; }

ChatTemplate ChatTemplate::from_jinja(const std::string& jinja) {
  if (contains(jinja, "<|im_start|>") && contains(jinja, "<|im_end|>")) {
    ChatTemplate t = by_name("chatml");
    t.default_system_ = extract_default_system(jinja);
    return t;
  }
  if (contains(jinja, "<|start_header_id|>")) return by_name("llama3");
  throw ConfigError("unrecognised chat template",
                    {"", "tokenizer.chat_template", "a template of a known format (" + known_list() + ")",
                     jinja.empty() ? "none" : "'" + jinja.substr(0, 60) + "...'",
                     "choose a known format by name (" + known_list() + ")"});
}

ChatTemplate ChatTemplate::by_name(const std::string& name) {
  ChatTemplate t;
  if (name == "chatml") return t;
  if (name == "llama3") {
    t.format_ = Format::kLlama3;
    t.bos_text_ = "<|begin_of_text|>";
    return t;
  }
  throw ConfigError("unknown chat format", {"", "chat format", "one of: " + known_list(), "'" + name + "'", ""});
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 bool include_bos) const {
  std::string out;
  // Both templates write their preamble inside the message loop: nothing for no messages.
  if (include_bos && !messages.empty()) out += bos_text_;
  if (format_ == Format::kLlama3) {
    for (const ChatMessage& m : messages) {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  if (!default_system_.empty() && !messages.empty() && messages.front().role != "system") {
    out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
  }
  for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string ChatTemplate::end_of_turn() const { return format_ == Format::kLlama3 ? "<|eot_id|>" : "<|im_end|>"; }

}  // namespace lorakv::formats

// formats/chat_template.h: renders chat messages in the model's chat format, recognised
// from its Jinja template metadata (tokenizer.chat_template) without a Jinja engine.
// ChatML for now (SmolLM2); more formats arrive with more model families.
#pragma once

#include <string>
#include <vector>

namespace lorakv::formats {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", or an agent's role name
  std::string content;
};

class ChatTemplate {
 public:
  enum class Format { kChatML };

  // Recognises the format of a Jinja chat template. Throws ConfigError for an unknown
  // template, naming the known formats (pick one with by_name()).
  static ChatTemplate from_jinja(const std::string& jinja);
  // A known format by name ("chatml"); throws ConfigError listing the names.
  static ChatTemplate by_name(const std::string& name);

  Format format() const { return format_; }
  // The system turn inserted when the conversation has none (SmolLM2's template has one);
  // empty means none is inserted.
  const std::string& default_system() const { return default_system_; }

  // Renders the messages; with add_generation_prompt, ends with the assistant's header.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  // The text that ends a turn ("<|im_end|>" in ChatML): a natural stop string.
  std::string end_of_turn() const;

 private:
  Format format_ = Format::kChatML;
  std::string default_system_;
};

}  // namespace lorakv::formats

// formats/chat_template.h: renders chat messages in the model's chat format, recognised
// from its Jinja template metadata (tokenizer.chat_template) without a Jinja engine.
// Two formats, each rendered exactly as transformers' apply_chat_template renders the
// template it is recognised from (tests/formats/chat_template_test.cpp holds those
// templates and the expected strings):
//   chatml  "<|im_start|>{role}\n{content}<|im_end|>\n" per message (SmolLM2, Qwen2);
//           a default system turn when the template has one and the first message is not
//           a system message.
//   llama3  "<|start_header_id|>{role}<|end_header_id|>\n\n{trimmed content}<|eot_id|>" per
//           message, after "<|begin_of_text|>" (the template writes bos_token first). Llama
//           3.1+ templates also add a "Cutting Knowledge Date" system preamble and tool
//           blocks, which are not reproduced.
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
  enum class Format { kChatML, kLlama3 };

  // Recognises the format of a Jinja chat template: ChatML by <|im_start|> and <|im_end|>,
  // Llama 3 by <|start_header_id|>. Throws ConfigError for an unknown or empty template,
  // naming the known formats and how to pick one by name.
  static ChatTemplate from_jinja(const std::string& jinja);
  // A known format by name ("chatml", "llama3"); throws ConfigError listing the names.
  static ChatTemplate by_name(const std::string& name);
  static const std::vector<std::string>& known_names();

  Format format() const { return format_; }
  const char* name() const;  // "chatml" or "llama3"
  // The system turn inserted when the conversation has none (SmolLM2's template has one);
  // empty means none is inserted.
  const std::string& default_system() const { return default_system_; }
  // The BOS token's text the template writes before the first message ("<|begin_of_text|>"
  // for Llama 3, "" for ChatML).
  const std::string& bos_text() const { return bos_text_; }

  // Renders the messages; with add_generation_prompt, ends with the assistant's header.
  // With include_bos (as transformers renders), a non-empty conversation starts with
  // bos_text(); pass false when the caller prepends the BOS id itself, so it is not doubled.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     bool include_bos = true) const;
  // The text that ends a turn ("<|im_end|>" in ChatML, "<|eot_id|>" in Llama 3): a special
  // token, and a natural stop token.
  std::string end_of_turn() const;

 private:
  Format format_ = Format::kChatML;
  std::string default_system_;
  std::string bos_text_;
};

}  // namespace lorakv::formats

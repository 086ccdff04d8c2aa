// agents/chat_layout.h: the token layout of a session's trajectory, the one the role
// adapters were trained on (tools/agentic_qa/README.md): append-only ChatML, no BOS, every
// turn encode("<|im_start|>{role}\n"), encode(text), <|im_end|>, encode("\n"). An agent's
// role is its turn name. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lorakv/formats/bpe_tokenizer.h"

namespace lorakv::agents {

class ChatLayout {
 public:
  // Throws ConfigError when the vocabulary has no <|im_start|> or <|im_end|>.
  explicit ChatLayout(const formats::BpeTokenizer& tokenizer);

  // The ids of "<|im_start|>{role}\n". Throws ConfigError for an empty role or one with a
  // newline or a special token's text in it (it would change the layout).
  std::vector<int32_t> header(const std::string& role) const;
  // A whole turn: header, text, <|im_end|>, newline. The text's special-token spellings
  // ("<|im_end|>") are encoded as plain text: a message cannot forge a turn.
  std::vector<int32_t> turn(const std::string& role, const std::string& text) const;
  // Text as it is, special tokens written in it parsed (Session::append_text, the raw entry).
  std::vector<int32_t> text(const std::string& text) const { return tokenizer_.encode(text); }
  // What closes a turn after its text: <|im_end|> then the newline.
  int32_t end_id() const { return end_id_; }
  const std::vector<int32_t>& newline() const { return newline_; }

  const formats::BpeTokenizer& tokenizer() const { return tokenizer_; }

 private:
  const formats::BpeTokenizer& tokenizer_;
  int32_t end_id_ = 0;
  std::vector<int32_t> newline_;
};

}  // namespace lorakv::agents

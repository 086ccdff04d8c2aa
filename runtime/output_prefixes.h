// runtime/output_prefixes.h: constrains a reply to start with one of given prefixes
// ("Lookup[", "Calculate[", "Finish["), whatever tokens spell it: while the text so far
// has not covered a whole prefix, only tokens whose text keeps it on some prefix (as its
// start, or running past a whole one) may come next. Special tokens and tokens with no
// text are never allowed while it is active. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lorakv/formats/bpe_tokenizer.h"

namespace lorakv::runtime {

class OutputPrefixes {
 public:
  // Throws ConfigError for an empty prefix. No prefixes: never active.
  OutputPrefixes(const formats::BpeTokenizer& tokenizer, std::vector<std::string> prefixes);

  // Whether the constraint still applies (the text so far covers no whole prefix).
  bool active() const;
  // The tokens allowed next, ascending. Throws ConfigError when none is (no token of the
  // vocabulary continues any prefix).
  std::vector<int32_t> allowed() const;
  // Records the token that came next.
  void accept(int32_t token);
  const std::string& text() const { return text_; }

 private:
  bool fits(const std::string& candidate) const;

  const formats::BpeTokenizer& tokenizer_;
  std::vector<std::string> prefixes_;
  std::string text_;  // decoded bytes so far
};

}  // namespace lorakv::runtime

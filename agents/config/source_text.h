// agents/config/source_text.h: a config file's bytes, checked before any YAML parser sees
// them: yaml-cpp reads any bytes and recurses as deep as the text nests, so the size,
// the encoding and the characters are checked here, and marks are computed here too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lorakv/agents/config/config_error.h"

namespace lorakv::agents::config {

constexpr size_t kMaxConfigBytes = size_t{1} << 20;  // a session config is a few KiB

// Reads `path` (as named, for errors) whole. Throws ConfigFileError for a missing path, a
// directory or anything else that is not a regular file, an unreadable file, and a file
// over `max_bytes` (read no further than that).
std::string read_config_bytes(const std::string& path, size_t max_bytes = kMaxConfigBytes);

// Whether `text` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_valid_utf8(const std::string& text);

class SourceText {
 public:
  // Checks `bytes`: at most `max_bytes`, not empty, valid UTF-8 (a leading BOM is
  // dropped), no control characters but tab and line breaks, no lone carriage return.
  // Throws ConfigFileError at the first bad byte's line:col, naming `name`.
  SourceText(std::string bytes, std::string name, size_t max_bytes = kMaxConfigBytes);

  const std::string& text() const { return text_; }
  const std::string& name() const { return name_; }
  // yaml-cpp's mark (0-based line, 0-based column in bytes) as a 1-based line and a
  // 1-based column in characters.
  SourceMark mark(int line0, int byte_column0) const;
  [[noreturn]] void fail(SourceMark mark, const std::string& message, const std::string& hint = "") const;

 private:
  std::string text_, name_;
  std::vector<size_t> line_starts_;     // byte offset of each line's first byte
  std::vector<uint32_t> chars_before_;  // characters before each byte offset (marks in O(1))
};

}  // namespace lorakv::agents::config

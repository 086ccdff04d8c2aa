// agents/config/source_text.cpp: the byte checks of a config file and its marks.
#include "lorakv/agents/config/source_text.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "lorakv/formats/unicode.h"

namespace lorakv::agents::config {
namespace {

std::string human_bytes(size_t n) {
  if (n >= (size_t{1} << 20) && n % (size_t{1} << 20) == 0) return std::to_string(n >> 20) + " MiB";
  return std::to_string(n) + " bytes";
}

// The length of the valid UTF-8 sequence at text[i], or 0 when it is not one (overlong
// forms, surrogates and code points above U+10FFFF are invalid).
size_t utf8_sequence_length(const std::string& text, size_t i) {
  const formats::Utf8Unit u = formats::utf8_unit_at(text, i);
  return u.well_formed ? u.length : 0;
}

// What is wrong with the character at text[i] (valid UTF-8 of `length` bytes), or "".
std::string bad_character(const std::string& text, size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  if (c == '\r' && (i + 1 >= text.size() || text[i + 1] != '\n')) {
    return "a carriage return without a line feed after it (use \\n or \\r\\n line ends)";
  }
  if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F) {
    char code[8];
    std::snprintf(code, sizeof(code), "0x%02X", c);
    return std::string("the control character ") + code + " (YAML text may hold tabs and line breaks only)";
  }
  return "";
}

}  // namespace

bool is_valid_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = utf8_sequence_length(text, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

std::string read_config_bytes(const std::string& path, size_t max_bytes) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    throw ConfigFileError(path, {}, "", std::string("cannot open the config file: ") + std::strerror(errno),
                          "check the path (relative paths start at the current folder)");
  }
  if (S_ISDIR(info.st_mode)) {
    throw ConfigFileError(path, {}, "", "this is a directory, not a YAML file", "name the .yaml file inside it");
  }
  if (!S_ISREG(info.st_mode)) {
    throw ConfigFileError(path, {}, "", "this is not a regular file (a device, pipe or socket)",
                          "name a .yaml file");
  }
  if (static_cast<uint64_t>(info.st_size) > max_bytes) {
    throw ConfigFileError(path, {}, "", "the file is " + std::to_string(info.st_size) + " bytes, over the limit of " +
                                            human_bytes(max_bytes),
                          "a session config is a few KiB; put long texts in a documents_file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigFileError(path, {}, "", "cannot read the config file", "check its permissions");
  std::string bytes(max_bytes + 1, '\0');  // one more, to notice a file that grew meanwhile
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

SourceText::SourceText(std::string bytes, std::string name, size_t max_bytes)
    : text_(std::move(bytes)), name_(std::move(name)) {
  if (text_.size() > max_bytes) {
    fail({}, "the text is " + std::to_string(text_.size()) + " bytes, over the limit of " + human_bytes(max_bytes),
         "a session config is a few KiB; put long texts in a documents_file");
  }
  if (text_.rfind("\xEF\xBB\xBF", 0) == 0) text_.erase(0, 3);
  line_starts_.push_back(0);
  chars_before_.assign(text_.size() + 1, 0);
  int line = 1, column = 1;
  uint32_t chars = 0;
  for (size_t i = 0; i < text_.size();) {
    const size_t length = utf8_sequence_length(text_, i);
    if (length == 0) {
      fail({line, column}, "the file is not valid UTF-8 here", "save the file as UTF-8");
    }
    const std::string bad = bad_character(text_, i);
    if (!bad.empty()) fail({line, column}, "the file holds " + bad, "remove the character");
    if (text_[i] == '\n') {
      line_starts_.push_back(i + 1);
      ++line;
      column = 1;
    } else {
      ++column;
    }
    for (size_t k = 0; k < length; ++k) chars_before_[i + k] = chars;
    ++chars;
    i += length;
  }
  chars_before_[text_.size()] = chars;
  if (text_.find_first_not_of(" \t\r\n") == std::string::npos) {
    fail({}, "the file is empty", "a session config is a YAML map with model, agents and workflow");
  }
}

SourceMark SourceText::mark(int line0, int byte_column0) const {
  if (line0 < 0 || static_cast<size_t>(line0) >= line_starts_.size()) return {};
  const size_t start = line_starts_[static_cast<size_t>(line0)];
  const size_t end = std::min(text_.size(), start + static_cast<size_t>(std::max(byte_column0, 0)));
  return {line0 + 1, static_cast<int>(chars_before_[end] - chars_before_[start]) + 1};
}

void SourceText::fail(SourceMark mark, const std::string& message, const std::string& hint) const {
  throw ConfigFileError(name_, mark, "", message, hint);
}

}  // namespace lorakv::agents::config

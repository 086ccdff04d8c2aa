// agents/config/config_error.cpp: the located config error's message.
#include "lorakv/agents/config/config_error.h"

namespace lorakv::agents::config {

std::string format_location(const std::string& file, SourceMark mark) {
  if (mark.line <= 0) return file;
  return file + ":" + std::to_string(mark.line) + ":" + std::to_string(mark.column);
}

ConfigFileError::ConfigFileError(const std::string& file, SourceMark mark, const std::string& key_path,
                                 const std::string& message, const std::string& hint)
    : ConfigError(message, {format_location(file, mark), key_path, "", "", hint}),
      file_(file),
      mark_(mark),
      key_path_(key_path) {}

}  // namespace lorakv::agents::config

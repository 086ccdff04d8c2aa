// agents/config/config_error.h: the one error a session config file gets, and where in the
// file it points. Every refusal of the loader and of the later checks (the model-aware
// check, the runner) is a ConfigFileError naming file:line:col, the key path and a hint.
#pragma once

#include <string>

#include "lorakv/common/errors.h"

namespace lorakv::agents::config {

// A place in the YAML text: 1-based line and column (columns count characters, a tab is
// one). line 0: no place (the whole file).
struct SourceMark {
  int line = 0;
  int column = 0;
};

// "file:line:col", or "file" for a mark without a line.
std::string format_location(const std::string& file, SourceMark mark);

// A ConfigError (so a catch of ConfigError still sees it) that knows its place:
//   config error in 'react_qa.yaml:12:5': unknown key `writter` in `cache`; did you mean
//   `writer`? [cache.writter] (hint: the keys of `cache` are mode, writer, ...)
class ConfigFileError : public ConfigError {
 public:
  ConfigFileError(const std::string& file, SourceMark mark, const std::string& key_path, const std::string& message,
                  const std::string& hint = "");

  const std::string& file() const { return file_; }
  SourceMark mark() const { return mark_; }
  const std::string& key_path() const { return key_path_; }

 private:
  std::string file_;
  SourceMark mark_;
  std::string key_path_;
};

}  // namespace lorakv::agents::config

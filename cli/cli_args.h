// cli/cli_args.h: a small flag parser for the CLI: "--name value", "--name=value" and
// boolean "--name". Unknown flags, missing values and values out of range are UsageErrors
// naming the flag.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"

namespace lorakv::cli {

// A command line that is wrong by itself, whatever the files it names hold: an unknown
// command or flag, a missing or malformed value, flags that exclude each other. Its own
// exit code (cli.h, kExitUsage) tells a script "fix the invocation" from "fix the input".
// A ConfigError, so code that catches bad values catches it too.
class UsageError : public ConfigError {
 public:
  explicit UsageError(const std::string& message, ErrorContext context = {})
      : ConfigError(ErrorCode::kUsage, "usage error", message, std::move(context)) {}
};

// The entry of `table` (items with a `name`) called `name`, or a UsageError naming `what`
// ("command", "benchmark") with every name the table has and `hint`.
template <typename Table>
const auto& find_named(const Table& table, const std::string& name, const std::string& what, const std::string& hint) {
  std::string names;
  for (const auto& entry : table) {
    if (entry.name == name) return entry;
    names += (names.empty() ? "" : ", ") + entry.name;
  }
  throw UsageError("unknown " + what, {"", name, "one of: " + names, "", hint});
}

// Runs a parser of another layer whose ConfigError names its own key ("dtype", "chat
// format", ".budget") and re-throws it as a UsageError naming `flag`, with `hint` when the
// error had none.
template <typename Parse>
auto for_flag(const std::string& flag, const std::string& hint, Parse&& parse) {
  try {
    return parse();
  } catch (const ConfigError& e) {
    ErrorContext c = e.context();
    c.key = flag;
    if (c.hint.empty()) c.hint = hint;
    throw UsageError(e.message(), c);
  }
}

class CliArgs {
 public:
  // value_flags take a value; bool_flags do not. Positional arguments are kept in order.
  CliArgs(const std::vector<std::string>& args, const std::set<std::string>& value_flags,
          const std::set<std::string>& bool_flags, const std::string& command);

  bool has(const std::string& flag) const { return bools_.count(flag) > 0 || values_.count(flag) > 0; }
  std::optional<std::string> get(const std::string& flag) const;  // the last value given
  std::vector<std::string> get_all(const std::string& flag) const;  // every value, in order
  std::string require(const std::string& flag) const;
  // An integer flag within [min, max], or `fallback` when absent.
  int64_t get_int(const std::string& flag, int64_t fallback, int64_t min, int64_t max) const;
  // A finite number within [min, max], or `fallback` when absent.
  double get_double(const std::string& flag, double fallback, double min, double max) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // "see 'lorakv <command> --help'", the hint of the parser's errors.
  std::string help_hint() const;

 private:
  std::string command_;
  std::map<std::string, std::vector<std::string>> values_;
  std::set<std::string> bools_;
  std::vector<std::string> positional_;
};

}  // namespace lorakv::cli

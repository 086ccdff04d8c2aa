// cli/cli_args.h: a small flag parser for the CLI: "--name value", "--name=value" and
// boolean "--name". Unknown flags and missing values are ConfigErrors naming the flag.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace lorakv::cli {

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

// cli/cli_args.cpp: flag parsing for the CLI.
#include "lorakv/cli/cli_args.h"

#include <cmath>

#include "lorakv/common/errors.h"

namespace lorakv::cli {

CliArgs::CliArgs(const std::vector<std::string>& args, const std::set<std::string>& value_flags,
                 const std::set<std::string>& bool_flags, const std::string& command)
    : command_(command) {
  const std::string hint = "see 'lorakv " + command + " --help'";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a, value;
    bool has_value = false;
    if (const size_t eq = a.find('='); eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    if (bool_flags.count(name)) {
      if (has_value) throw UsageError("flag takes no value", {"", name, "no value", "'" + value + "'", hint});
      bools_.insert(name);
    } else if (value_flags.count(name)) {
      if (!has_value) {
        if (i + 1 >= args.size()) throw UsageError("flag needs a value", {"", name, "a value", "nothing", hint});
        value = args[++i];
      }
      values_[name].push_back(value);
    } else {
      throw UsageError("unknown flag", {"", name, "", "", hint});
    }
  }
}

std::string CliArgs::help_hint() const { return "see 'lorakv " + command_ + " --help'"; }

std::optional<std::string> CliArgs::get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> CliArgs::get_all(const std::string& flag) const {
  auto it = values_.find(flag);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::string CliArgs::require(const std::string& flag) const {
  auto v = get(flag);
  if (!v) throw UsageError("missing required flag", {"", flag, "", "", help_hint()});
  return *v;
}

int64_t CliArgs::get_int(const std::string& flag, int64_t fallback, int64_t min, int64_t max) const {
  auto v = get(flag);
  if (!v) return fallback;
  const std::string range = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(*v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v->size() || n < min || n > max) {
    throw UsageError("invalid value", {"", flag, range, "'" + *v + "'", help_hint()});
  }
  return n;
}

double CliArgs::get_double(const std::string& flag, double fallback, double min, double max) const {
  auto v = get(flag);
  if (!v) return fallback;
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(*v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v->size() || !std::isfinite(x) || x < min || x > max) {
    throw UsageError("invalid value", {"", flag, "a number in [" + std::to_string(min) + ", " + std::to_string(max) + "]",
                                        "'" + *v + "'", help_hint()});
  }
  return x;
}

}  // namespace lorakv::cli

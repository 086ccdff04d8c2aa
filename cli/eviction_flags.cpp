// cli/eviction_flags.cpp: --policy, --budget, --sinks and --window into an EvictionConfig.
#include "lorakv/cli/eviction_flags.h"

#include <cmath>
#include <cstdio>
#include <optional>

#include "lorakv/common/errors.h"

namespace lorakv::cli {
namespace {

using cache::eviction::EvictionConfig;

const char* kBudgetExpected =
    "a number of tokens >= 1 (e.g. 256), or a fraction in (0, 1] written with a '.' (e.g. 0.25)";
constexpr int64_t kMaxTokens = int64_t{1} << 30;

// The whole of `text` as a number, or nullopt when any of it is left over.
std::optional<double> whole_double(const std::string& text) {
  size_t used = 0;
  try {
    const double x = std::stod(text, &used);
    if (used == text.size() && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// Digits only (no sign, no spaces), as a number, or nullopt.
std::optional<int64_t> whole_integer(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  size_t used = 0;
  try {
    const int64_t n = std::stoll(text, &used);
    if (used == text.size()) return n;
  } catch (const std::exception&) {  // out of range
  }
  return std::nullopt;
}

// --budget's value: a '.' makes it a fraction, else it is a count of tokens.
void parse_budget(const std::string& text, const CliArgs& args, EvictionConfig& config) {
  const ConfigError bad("invalid value", {"", "--budget", kBudgetExpected, "'" + text + "'", args.help_hint()});
  if (text.find('.') != std::string::npos) {
    const std::optional<double> fraction = whole_double(text);
    if (!fraction || !(*fraction > 0 && *fraction <= 1)) throw bad;
    config.budget_fraction = *fraction;
    return;
  }
  const std::optional<int64_t> tokens = whole_integer(text);
  if (!tokens || *tokens < 1 || *tokens > kMaxTokens) throw bad;
  config.budget_tokens = *tokens;
}

// A flag that only means something with a policy, given without one.
void refuse_without_policy(const CliArgs& args, const std::string& flag) {
  if (!args.has(flag)) return;
  throw ConfigError(flag + " needs an eviction policy",
                    {"", flag, "--policy streaming_llm or --policy h2o", "policy none",
                     "add --policy, or drop " + flag + " to keep every row"});
}

// EvictionConfig::check's key (".budget" under an empty prefix) as the flag it came from.
void check_naming_flags(const EvictionConfig& config, const CliArgs& args) {
  try {
    config.check("");
  } catch (const ConfigError& e) {
    ErrorContext c = e.context();
    if (!c.key.empty() && c.key[0] == '.') c.key = "--" + c.key.substr(1);
    if (c.hint.empty()) c.hint = args.help_hint();
    throw ConfigError(e.message(), c);
  }
}

// An unknown name, refused with the list of names before any budget is looked at.
void check_policy_name(const std::string& policy, const CliArgs& args) {
  EvictionConfig named;
  named.policy = policy;
  named.budget_tokens = 1;  // only the name is in question here
  check_naming_flags(named, args);
}

}  // namespace

const std::set<std::string>& eviction_value_flags() {
  static const std::set<std::string> flags = {"--policy", "--budget", "--sinks", "--window"};
  return flags;
}

const char* eviction_flags_help() {
  return R"(  --policy NAME             KV eviction: none (default: every row kept), streaming_llm (the
                            first --sinks and the newest rows), or h2o (the rows with the most
                            attention so far); the engine evicts after every step
  --budget N|F              with a policy (required): N >= 1 rows kept per layer and head group, or
                            F in (0, 1] (written with a '.') of the context's tokens
  --sinks N                 first positions never evicted (default 4)
  --window N                newest rows never evicted (default 16)
)";
}

EvictionConfig parse_eviction_flags(const CliArgs& args) {
  EvictionConfig config;
  config.policy = args.get("--policy").value_or("none");
  check_policy_name(config.policy, args);
  if (!config.enabled()) {
    for (const char* flag : {"--budget", "--sinks", "--window"}) refuse_without_policy(args, flag);
    return config;
  }
  const std::optional<std::string> budget = args.get("--budget");
  if (!budget) {
    throw ConfigError("--policy " + config.policy + " needs --budget",
                      {"", "--budget", kBudgetExpected, "nothing", "e.g. --budget 256, or --budget 0.25"});
  }
  parse_budget(*budget, args, config);
  config.sinks = args.get_int("--sinks", config.sinks, 0, kMaxTokens);
  config.window = args.get_int("--window", config.window, 0, kMaxTokens);
  check_naming_flags(config, args);
  return config;
}

std::string describe_eviction(const EvictionConfig& config) {
  if (!config.enabled()) return "none";
  char budget[64];
  if (config.budget_tokens > 0) {
    std::snprintf(budget, sizeof budget, "budget %lld tokens", static_cast<long long>(config.budget_tokens));
  } else {
    std::snprintf(budget, sizeof budget, "budget %g of the context", config.budget_fraction);
  }
  return config.policy + ", " + budget + ", sinks " + std::to_string(config.sinks) + ", window " +
         std::to_string(config.window);
}

}  // namespace lorakv::cli

// cli/eviction_flags.cpp: --policy, --budget, --sinks and --window into an EvictionConfig.
#include "lorakv/cli/eviction_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "lorakv/cli/cli_args.h"
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
  const UsageError bad("invalid value", {"", "--budget", kBudgetExpected, "'" + text + "'", args.help_hint()});
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

// --layer-budgets: pyramid, flat, or a comma-separated weight per layer (a list).
void parse_layer_budgets(const std::string& text, const CliArgs& args, EvictionConfig& config) {
  if (text == "pyramid" || text == "flat") {
    config.layer_budgets = text;
    return;
  }
  config.layer_budgets = "list";
  size_t from = 0;
  while (from <= text.size()) {
    const size_t comma = std::min(text.find(',', from), text.size());
    const std::optional<double> w = whole_double(text.substr(from, comma - from));
    if (!w || !(*w > 0)) {
      throw UsageError("invalid value", {"", "--layer-budgets", "pyramid, flat, or one positive weight per layer (1,1,2,...)",
                                          "'" + text + "'", args.help_hint()});
    }
    config.layer_weights.push_back(*w);
    from = comma + 1;
  }
}

// The policies' own keys (scoring, per-layer and per-head budgets, leverage's rank, capkv's).
void parse_policy_keys(const CliArgs& args, EvictionConfig& config) {
  config.scoring = args.get("--scoring").value_or(config.scoring);
  if (const std::optional<std::string> curve = args.get("--layer-budgets")) parse_layer_budgets(*curve, args, config);
  config.pyramid_beta = args.get_double("--pyramid-beta", config.pyramid_beta, 1, 1e6);
  config.head_floor = args.get_double("--head-floor", config.head_floor, 0, 1);
  config.leverage_rank = args.get_int("--leverage-rank", config.leverage_rank, 1, 1 << 16);
  config.capkv_tau = args.get_double("--capkv-tau", config.capkv_tau, 0, 1e6);
  config.capkv_future_positions = args.get_int("--capkv-future-positions", config.capkv_future_positions, 1, 1 << 20);
}

// A flag that only means something with a policy, given without one.
void refuse_without_policy(const CliArgs& args, const std::string& flag) {
  if (!args.has(flag)) return;
  throw UsageError(flag + " needs an eviction policy",
                    {"", flag, "--policy NAME (see --help)", "policy none",
                     "add --policy, or drop " + flag + " to keep every row"});
}

// A key of EvictionConfig::check as its flag: layer_weights -> --layer-budgets, pyramid_beta
// -> --pyramid-beta.
std::string flag_of_key(std::string key) {
  if (key == "layer_weights") return "--layer-budgets";
  std::replace(key.begin(), key.end(), '_', '-');
  return "--" + key;
}

// EvictionConfig::check's key (".budget" under an empty prefix) as the flag it came from.
void check_naming_flags(const EvictionConfig& config, const CliArgs& args) {
  try {
    config.check("");
  } catch (const ConfigError& e) {
    ErrorContext c = e.context();
    if (!c.key.empty() && c.key[0] == '.') c.key = flag_of_key(c.key.substr(1));
    if (c.hint.empty()) c.hint = args.help_hint();
    throw UsageError(e.message(), c);
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
  static const std::set<std::string> flags = {"--policy",        "--budget",       "--sinks",      "--window",
                                              "--scoring",       "--layer-budgets", "--pyramid-beta", "--head-floor",
                                              "--leverage-rank", "--capkv-tau", "--capkv-future-positions",
                                              "--window-growth"};
  return flags;
}

const std::set<std::string>& eviction_bool_flags() {
  static const std::set<std::string> flags = {"--loss-bound"};
  return flags;
}

const char* eviction_flags_help() {
  return R"(  --policy NAME             KV eviction: none (default: every row kept), streaming_llm (the
                            first --sinks and the newest rows), h2o (the most attention so far),
                            snapkv (the most attention from the newest --window queries),
                            pyramidkv (snapkv with per-layer budgets), adakv (snapkv with a
                            layer's budget spread over its KV heads; needs --per-head where the
                            command has it), leverage (keys most in the keys' main directions),
                            capkv (rows adding most output capacity where the mean query points);
                            the engine evicts after every step
  --budget N|F              with a policy (required): N >= 1 rows kept per layer and head group, or
                            F in (0, 1] (written with a '.') of the context's tokens
  --sinks N                 first positions never evicted (default 4)
  --window N                newest rows never evicted (default 16); the snapkv family's
                            observation window
  --window-growth G         during a reply the protected window grows by G rows per reply
                            token, up to the budget less the sinks (default 0: fixed)
  --loss-bound              report the eviction loss bound (a bound on each head's attention
                            output change from the rows evicted; costs a second QK pass)
  --scoring sum|max|writer  whose attention scores a shared row: every reader's summed, the max
                            over readers, or the writer's alone (default: sum for h2o, writer for
                            the snapkv family and capkv, which takes only writer)
  --layer-budgets CURVE     pyramidkv: pyramid (default), flat, or weights per layer (1,1,2,...)
  --pyramid-beta B          pyramidkv: the pyramid's steepness, >= 1 (default 20)
  --head-floor F            adakv: each KV head keeps at least F of its share (default 0.2)
  --leverage-rank R         leverage: main directions of the keys (default 8)
  --capkv-tau T             capkv: sharpness of the query-key weights, >= 0 (default 5)
  --capkv-future-positions N
                            capkv: positions after the context its anchor's RoPE averages over
                            (default 512)
)";
}

EvictionConfig parse_eviction_flags(const CliArgs& args) {
  EvictionConfig config;
  config.policy = args.get("--policy").value_or("none");
  check_policy_name(config.policy, args);
  if (!config.enabled()) {
    for (const std::string& flag : eviction_value_flags()) {
      if (flag != "--policy") refuse_without_policy(args, flag);
    }
    for (const std::string& flag : eviction_bool_flags()) refuse_without_policy(args, flag);
    return config;
  }
  const std::optional<std::string> budget = args.get("--budget");
  if (!budget) {
    throw UsageError("--policy " + config.policy + " needs --budget",
                      {"", "--budget", kBudgetExpected, "nothing", "e.g. --budget 256, or --budget 0.25"});
  }
  parse_budget(*budget, args, config);
  config.sinks = args.get_int("--sinks", config.sinks, 0, kMaxTokens);
  config.window = args.get_int("--window", config.window, 0, kMaxTokens);
  config.window_growth = args.get_double("--window-growth", config.window_growth, 0, 1e6);
  config.loss_bound = args.has("--loss-bound");
  parse_policy_keys(args, config);
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
  std::string text = config.policy + ", " + budget + ", sinks " + std::to_string(config.sinks) + ", window " +
                     std::to_string(config.window);
  if (config.window_growth > 0) {
    char growth[48];
    std::snprintf(growth, sizeof growth, " + %g per reply token", config.window_growth);
    text += growth;
  }
  if (config.policy != "streaming_llm" && config.policy != "leverage") text += ", scoring " + config.resolved_scoring();
  if (config.policy == "pyramidkv") text += ", layer budgets " + config.layer_budgets;
  if (config.policy == "adakv") text += ", head floor " + std::to_string(config.head_floor);
  if (config.policy == "leverage") text += ", rank " + std::to_string(config.leverage_rank);
  if (config.policy == "capkv") {
    char capkv[96];
    std::snprintf(capkv, sizeof capkv, ", tau %g, %lld future positions", config.capkv_tau,
                  static_cast<long long>(config.capkv_future_positions));
    text += capkv;
  }
  return text;
}

}  // namespace lorakv::cli

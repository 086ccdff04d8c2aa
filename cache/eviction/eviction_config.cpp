// cache/eviction/eviction_config.cpp: the budget and the keys' checks.
#include "lorakv/cache/eviction/eviction_config.h"

#include <algorithm>
#include <cmath>

#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names{"none",      "streaming_llm", "h2o",   "snapkv",
                                                "pyramidkv", "adakv",         "leverage", "capkv"};
  return names;
}

const std::vector<std::string>& scoring_names() {
  static const std::vector<std::string> names{"auto", "sum", "max", "writer"};
  return names;
}

const std::vector<std::string>& layer_budget_names() {
  static const std::vector<std::string> names{"pyramid", "flat", "list"};
  return names;
}

namespace {

bool observes_a_window(const std::string& policy) {
  return policy == "snapkv" || policy == "pyramidkv" || policy == "adakv";
}

bool scores_by_mass(const std::string& policy) { return policy == "h2o" || observes_a_window(policy); }

std::string joined(const std::vector<std::string>& names) {
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
  return all;
}

void check_choice(const std::string& value, const std::vector<std::string>& names, const std::string& key,
                  const std::string& what) {
  if (std::find(names.begin(), names.end(), value) == names.end()) {
    throw ConfigError("unknown " + what, {"", key, "one of " + joined(names), value, ""});
  }
}

void check_budget(const EvictionConfig& c, const std::string& where) {
  if (c.budget_tokens < 0) {
    throw ConfigError("the token budget cannot be negative",
                      {"", where + ".budget", "a number of tokens >= 1, or a fraction in (0, 1]", std::to_string(c.budget_tokens), ""});
  }
  if (!(c.budget_fraction >= 0 && c.budget_fraction <= 1)) {
    throw ConfigError("the budget fraction must lie in (0, 1]",
                      {"", where + ".budget", "a fraction in (0, 1], or a number of tokens", std::to_string(c.budget_fraction), ""});
  }
  if (c.budget_tokens > 0 && c.budget_fraction > 0) {
    throw ConfigError("give the budget as tokens or as a fraction, not both", {"", where + ".budget", "", "", ""});
  }
  if (c.enabled() && c.budget_tokens == 0 && c.budget_fraction == 0) {
    throw ConfigError("eviction policy " + c.policy + " needs a budget",
                      {"", where + ".budget", "a number of tokens >= 1, or a fraction in (0, 1]", "none",
                       "or set the policy to none"});
  }
}

void check_rows(const EvictionConfig& c, const std::string& where) {
  if (observes_a_window(c.policy) && c.window < 1) {
    throw ConfigError(c.policy + " observes the newest `window` queries; it needs at least one",
                      {"", where + ".window", ">= 1", std::to_string(c.window), ""});
  }
  if (!(c.window_growth >= 0) || !std::isfinite(c.window_growth)) {
    throw ConfigError("the window grows by a share of the output: a number >= 0",
                      {"", where + ".window_growth", ">= 0 (0: a fixed window)", std::to_string(c.window_growth), ""});
  }
  if (c.sinks < 0 || c.window < 0) {
    throw ConfigError("sinks and window cannot be negative",
                      {"", where + (c.sinks < 0 ? ".sinks" : ".window"), ">= 0", std::to_string(std::min(c.sinks, c.window)), ""});
  }
  for (const auto& [begin, end] : c.protected_spans) {
    if (begin < 0 || end < begin) {
      throw ConfigError("a protected span is [begin, end) with 0 <= begin <= end",
                        {"", where + ".protected", "", std::to_string(begin) + ".." + std::to_string(end), ""});
    }
  }
}

void check_scoring(const EvictionConfig& c, const std::string& where) {
  check_choice(c.scoring, scoring_names(), where + ".scoring", "scoring");
  if (c.policy == "capkv") {
    // Its anchor is one mean query: the work writing the rows, as kvpress's prompt.
    if (c.scoring != "auto" && c.scoring != "writer") {
      throw ConfigError("capkv's anchor is the mean query of the work writing the rows; other readers' queries do not enter it",
                        {"", where + ".scoring", "auto or writer", c.scoring, ""});
    }
    return;
  }
  if (c.scoring != "auto" && c.enabled() && !scores_by_mass(c.policy)) {
    throw ConfigError("policy " + c.policy + " does not score rows by attention mass",
                      {"", where + ".scoring", "auto", c.scoring, "scoring applies to h2o, snapkv, pyramidkv and adakv"});
  }
}

void check_layer_budgets(const EvictionConfig& c, const std::string& where) {
  check_choice(c.layer_budgets, layer_budget_names(), where + ".layer_budgets", "layer budget curve");
  if (c.layer_budgets == "list" && c.layer_weights.empty()) {
    throw ConfigError("layer_budgets: list needs one weight per layer",
                      {"", where + ".layer_weights", "a list of positive numbers, one per layer", "none", ""});
  }
  if (c.layer_budgets != "list" && !c.layer_weights.empty()) {
    throw ConfigError("layer_weights are read only with layer_budgets: list",
                      {"", where + ".layer_budgets", "list", c.layer_budgets, ""});
  }
  for (double w : c.layer_weights) {
    if (!(w > 0) || !std::isfinite(w)) {
      throw ConfigError("a layer weight must be a positive number", {"", where + ".layer_weights", "> 0", std::to_string(w), ""});
    }
  }
  if (!(c.pyramid_beta >= 1) || !std::isfinite(c.pyramid_beta)) {
    throw ConfigError("the pyramid's steepness must be at least 1",
                      {"", where + ".pyramid_beta", ">= 1 (PyramidKV uses 20)", std::to_string(c.pyramid_beta), ""});
  }
}

void check_head_floor_and_rank(const EvictionConfig& c, const std::string& where) {
  if (!(c.head_floor >= 0 && c.head_floor <= 1)) {
    throw ConfigError("adakv's head floor is a share of the per-head budget",
                      {"", where + ".head_floor", "in [0, 1] (Ada-KV uses 0.2)", std::to_string(c.head_floor), ""});
  }
  if (c.leverage_rank < 1) {
    throw ConfigError("leverage projects on at least one direction",
                      {"", where + ".leverage_rank", ">= 1", std::to_string(c.leverage_rank), ""});
  }
}

void check_capkv(const EvictionConfig& c, const std::string& where) {
  if (!(c.capkv_tau >= 0) || !std::isfinite(c.capkv_tau)) {
    throw ConfigError("capkv's temperature weighs rows by exp(tau * cosine); it cannot be negative",
                      {"", where + ".capkv_tau", ">= 0 (CapKV uses 5)", std::to_string(c.capkv_tau), ""});
  }
  if (c.capkv_future_positions < 1 || c.capkv_future_positions > (int64_t{1} << 20)) {
    throw ConfigError("capkv averages its anchor's RoPE over at least one future position",
                      {"", where + ".capkv_future_positions", "in 1..1048576 (CapKV uses 512)",
                       std::to_string(c.capkv_future_positions), ""});
  }
}

}  // namespace

int64_t EvictionConfig::budget_rows(int64_t tokens) const {
  if (!enabled()) return -1;
  if (budget_tokens > 0) return budget_tokens;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(budget_fraction * static_cast<double>(tokens))));
}

int64_t EvictionConfig::window_extra(int64_t output_tokens) const {
  return static_cast<int64_t>(std::floor(window_growth * static_cast<double>(std::max<int64_t>(0, output_tokens))));
}

std::string EvictionConfig::resolved_scoring() const {
  if (scoring != "auto") return scoring;
  return observes_a_window(policy) || policy == "capkv" ? "writer" : "sum";
}

void EvictionConfig::check(const std::string& where) const {
  check_choice(policy, policy_names(), where + ".policy", "eviction policy");
  check_budget(*this, where);
  check_rows(*this, where);
  check_scoring(*this, where);
  check_layer_budgets(*this, where);
  check_head_floor_and_rank(*this, where);
  check_capkv(*this, where);
}

}  // namespace lorakv::cache::eviction

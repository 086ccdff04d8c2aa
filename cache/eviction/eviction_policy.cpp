// cache/eviction/eviction_policy.cpp: the budget, the protected rows, the keys' checks and
// the factory. Each policy's choice lives in its own file.
#include "lorakv/cache/eviction/eviction_policy.h"

#include <algorithm>
#include <cmath>

#include "lorakv/cache/eviction/policies.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names{"none", "streaming_llm", "h2o", "snapkv"};
  return names;
}

int64_t EvictionConfig::budget_rows(int64_t tokens) const {
  if (!enabled()) return -1;
  if (budget_tokens > 0) return budget_tokens;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(budget_fraction * static_cast<double>(tokens))));
}

void EvictionConfig::check(const std::string& where) const {
  const std::vector<std::string>& names = policy_names();
  if (std::find(names.begin(), names.end(), policy) == names.end()) {
    std::string all;
    for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
    throw ConfigError("unknown eviction policy", {"", where + ".policy", "one of " + all, policy, ""});
  }
  if (budget_tokens < 0) {
    throw ConfigError("the token budget cannot be negative",
                      {"", where + ".budget", "a number of tokens >= 1, or a fraction in (0, 1]", std::to_string(budget_tokens), ""});
  }
  if (!(budget_fraction >= 0 && budget_fraction <= 1)) {
    throw ConfigError("the budget fraction must lie in (0, 1]",
                      {"", where + ".budget", "a fraction in (0, 1], or a number of tokens", std::to_string(budget_fraction), ""});
  }
  if (budget_tokens > 0 && budget_fraction > 0) {
    throw ConfigError("give the budget as tokens or as a fraction, not both", {"", where + ".budget", "", "", ""});
  }
  if (enabled() && budget_tokens == 0 && budget_fraction == 0) {
    throw ConfigError("eviction policy " + policy + " needs a budget",
                      {"", where + ".budget", "a number of tokens >= 1, or a fraction in (0, 1]", "none",
                       "or set the policy to none"});
  }
  if (policy == "snapkv" && window < 1) {
    throw ConfigError("snapkv observes the newest `window` queries; it needs at least one",
                      {"", where + ".window", ">= 1", std::to_string(window), ""});
  }
  if (sinks < 0 || window < 0) {
    throw ConfigError("sinks and window cannot be negative",
                      {"", where + (sinks < 0 ? ".sinks" : ".window"), ">= 0", std::to_string(std::min(sinks, window)), ""});
  }
  for (const auto& [begin, end] : protected_spans) {
    if (begin < 0 || end < begin) {
      throw ConfigError("a protected span is [begin, end) with 0 <= begin <= end",
                        {"", where + ".protected", "", std::to_string(begin) + ".." + std::to_string(end), ""});
    }
  }
}

std::vector<int64_t> EvictionPolicy::keep(const LaneCandidates& lane, int64_t budget) const {
  const auto n = static_cast<int64_t>(lane.positions.size());
  std::vector<uint8_t> kept(static_cast<size_t>(n), 0);
  int64_t num_kept = 0;
  auto protect = [&](int64_t i) {
    if (!kept[static_cast<size_t>(i)]) {
      kept[static_cast<size_t>(i)] = 1;
      ++num_kept;
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    const int32_t p = lane.positions[static_cast<size_t>(i)];
    bool in_span = p < config_.sinks || i >= n - config_.window;
    for (const auto& [b, e] : config_.protected_spans) in_span = in_span || (p >= b && p < e);
    if (in_span) protect(i);
  }
  std::vector<int64_t> candidates;
  for (int64_t i = 0; i < n; ++i) {
    if (!kept[static_cast<size_t>(i)]) candidates.push_back(i);
  }
  const int64_t room = std::max<int64_t>(0, budget - num_kept);
  if (room > 0 && !candidates.empty()) {
    for (int64_t i : choose(lane, candidates, std::min<int64_t>(room, static_cast<int64_t>(candidates.size())))) {
      LORAKV_ASSERT(i >= 0 && i < n && !kept[static_cast<size_t>(i)], "policy chose row " << i << " twice or out of range");
      protect(i);
    }
  }
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_kept));
  for (int64_t i = 0; i < n; ++i) {
    if (kept[static_cast<size_t>(i)]) out.push_back(i);
  }
  return out;
}

std::unique_ptr<EvictionPolicy> make_policy(const EvictionConfig& config) {
  config.check();
  if (config.policy == "streaming_llm") return std::make_unique<StreamingLlmPolicy>(config);
  if (config.policy == "h2o") return std::make_unique<H2oPolicy>(config);
  if (config.policy == "snapkv") return std::make_unique<SnapKvPolicy>(config);
  return nullptr;
}

}  // namespace lorakv::cache::eviction

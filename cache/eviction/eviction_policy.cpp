// cache/eviction/eviction_policy.cpp: the protected rows, the default per-lane choice and
// the factory. Each policy's choice lives in its own file.
#include "lorakv/cache/eviction/eviction_policy.h"

#include <algorithm>

#include "lorakv/cache/eviction/policies.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

int64_t EvictionPolicy::layer_budget(int64_t, int64_t, int64_t budget, int64_t) const { return budget; }

int64_t EvictionPolicy::protect(const LaneCandidates& lane, std::vector<uint8_t>& kept) const {
  const auto n = static_cast<int64_t>(lane.positions.size());
  const int64_t window = config_.window + lane.window_extra;
  int64_t num_kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t p = lane.positions[static_cast<size_t>(i)];
    bool in_span = p < config_.sinks || i >= n - window;
    for (const auto& [b, e] : config_.protected_spans) in_span = in_span || (p >= b && p < e);
    if (in_span && !kept[static_cast<size_t>(i)]) {
      kept[static_cast<size_t>(i)] = 1;
      ++num_kept;
    }
  }
  return num_kept;
}

std::vector<int64_t> EvictionPolicy::keep(const LaneCandidates& lane, int64_t budget) const {
  const auto n = static_cast<int64_t>(lane.positions.size());
  std::vector<uint8_t> kept(static_cast<size_t>(n), 0);
  int64_t num_kept = protect(lane, kept);
  std::vector<int64_t> candidates;
  for (int64_t i = 0; i < n; ++i) {
    if (!kept[static_cast<size_t>(i)]) candidates.push_back(i);
  }
  const int64_t room = std::max<int64_t>(0, budget - num_kept);
  if (room > 0 && !candidates.empty()) {
    for (int64_t i : choose(lane, candidates, std::min<int64_t>(room, static_cast<int64_t>(candidates.size())))) {
      LORAKV_ASSERT(i >= 0 && i < n && !kept[static_cast<size_t>(i)], "policy chose row " << i << " twice or out of range");
      kept[static_cast<size_t>(i)] = 1;
      ++num_kept;
    }
  }
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_kept));
  for (int64_t i = 0; i < n; ++i) {
    if (kept[static_cast<size_t>(i)]) out.push_back(i);
  }
  return out;
}

std::vector<std::vector<int64_t>> EvictionPolicy::keep_layer(const std::vector<LaneCandidates>& lanes, int64_t budget) const {
  std::vector<std::vector<int64_t>> out;
  out.reserve(lanes.size());
  for (const LaneCandidates& lane : lanes) out.push_back(keep(lane, budget));
  return out;
}

std::unique_ptr<EvictionPolicy> make_policy(const EvictionConfig& config) {
  config.check();
  if (config.policy == "streaming_llm") return std::make_unique<StreamingLlmPolicy>(config);
  if (config.policy == "h2o") return std::make_unique<H2oPolicy>(config);
  if (config.policy == "snapkv") return std::make_unique<SnapKvPolicy>(config);
  if (config.policy == "pyramidkv") return std::make_unique<PyramidKvPolicy>(config);
  if (config.policy == "adakv") return std::make_unique<AdaKvPolicy>(config);
  if (config.policy == "leverage") return std::make_unique<LeveragePolicy>(config);
  if (config.policy == "capkv") return std::make_unique<CapKvPolicy>(config);
  return nullptr;
}

}  // namespace lorakv::cache::eviction

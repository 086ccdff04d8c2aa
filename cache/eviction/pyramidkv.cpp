// cache/eviction/pyramidkv.cpp: SnapKV's choice under per-layer budgets.
#include <cmath>
#include <numeric>

#include "lorakv/cache/eviction/policies.h"
#include "lorakv/common/errors.h"

namespace lorakv::cache::eviction {

int64_t PyramidKvPolicy::layer_budget(int64_t layer, int64_t num_layers, int64_t budget, int64_t tokens) const {
  const EvictionConfig& c = config();
  if (c.layer_budgets == "flat" || num_layers < 2) return budget;
  if (c.layer_budgets == "list") {
    LORAKV_ASSERT(static_cast<int64_t>(c.layer_weights.size()) == num_layers, "layer_weights were checked against the model");
    const double total = std::accumulate(c.layer_weights.begin(), c.layer_weights.end(), 0.0);
    const double share = c.layer_weights[static_cast<size_t>(layer)] * static_cast<double>(num_layers) / total;
    return std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(static_cast<double>(budget) * share)));
  }
  return pyramid_budget(layer, num_layers, budget, tokens, c.window, c.pyramid_beta);
}

int64_t PyramidKvPolicy::pyramid_budget(int64_t layer, int64_t num_layers, int64_t budget, int64_t tokens, int64_t window,
                                        double beta) {
  // kvpress's PyramidKVPress.get_layer_budget (after KVCache-Factory), with its compression
  // ratio's kept count written as `budget`: the first layer keeps max_num rows, the last
  // min_num, linearly between, so that the mean over layers is the budget.
  const auto b = static_cast<double>(budget), q = static_cast<double>(tokens), w = static_cast<double>(window);
  double min_num = b / beta;
  double max_num = 2 * b - min_num;
  if (max_num >= q - w) {
    max_num = q - w;
    min_num = 2 * b - max_num;
  }
  if (!(q >= max_num && max_num >= min_num && min_num >= w)) return std::max<int64_t>(1, budget);
  const double steps = (max_num - min_num) / static_cast<double>(num_layers - 1);
  // Python's round(): halves to even, as std::nearbyint in the default rounding mode.
  return static_cast<int64_t>(std::nearbyint(max_num - static_cast<double>(layer) * steps));
}

}  // namespace lorakv::cache::eviction

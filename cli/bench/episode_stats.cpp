// cli/bench/episode_stats.cpp: Wilson interval and McNemar's exact test.
#include "lorakv/cli/bench/episode_stats.h"

#include <algorithm>
#include <cmath>

namespace lorakv::cli {

std::pair<double, double> wilson_interval(int64_t k, int64_t n, double z) {
  if (n <= 0) return {0, 0};
  const double nn = static_cast<double>(n), p = static_cast<double>(k) / nn, z2 = z * z;
  const double centre = (p + z2 / (2 * nn)) / (1 + z2 / nn);
  const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / (1 + z2 / nn);
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

double mcnemar_exact_p(int64_t b, int64_t c) {
  const int64_t n = b + c;
  if (n == 0) return 1.0;
  const int64_t low = std::min(b, c);
  // P(X <= low) for X ~ Binomial(n, 1/2), summed in log space (n is a few hundred at most).
  double tail = 0;
  for (int64_t i = 0; i <= low; ++i) {
    const double log_term = std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(i) + 1) -
                            std::lgamma(static_cast<double>(n - i) + 1) - static_cast<double>(n) * std::log(2.0);
    tail += std::exp(log_term);
  }
  return std::min(1.0, 2 * tail);
}

}  // namespace lorakv::cli

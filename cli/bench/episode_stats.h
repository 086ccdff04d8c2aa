// cli/bench/episode_stats.h: the statistics of `lorakv bench episodes`: a Wilson interval
// for a success rate, and McNemar's exact test for two modes run on the same questions.
#pragma once

#include <cstdint>
#include <utility>

namespace lorakv::cli {

// The 95% Wilson score interval of k successes in n (0, 0 for n = 0).
std::pair<double, double> wilson_interval(int64_t k, int64_t n, double z = 1.959963984540054);

// McNemar's exact two-sided p-value: b and c are the discordant pairs (right in one mode
// only, either way); under the null each is Binomial(b + c, 1/2). 1 when b + c = 0.
double mcnemar_exact_p(int64_t b, int64_t c);

}  // namespace lorakv::cli

// runtime/sampler.cpp: logits processing in Hugging Face's order (repetition penalty,
// temperature, top-k, top-p), then a draw from the remaining distribution.
#include "lorakv/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "lorakv/common/errors.h"

namespace lorakv::runtime {

void validate(const SamplingOptions& o) {
  auto bad = [](const char* key, const std::string& expected, double found) {
    throw ConfigError("invalid sampling option", {"", key, expected, std::to_string(found), ""});
  };
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature)) bad("temperature", ">= 0 (0 is greedy)", o.temperature);
  if (o.top_k < 0) bad("top_k", ">= 0 (0 keeps all)", static_cast<double>(o.top_k));
  if (!(o.top_p > 0.0 && o.top_p <= 1.0)) bad("top_p", "in (0, 1]", o.top_p);
  if (!(o.repetition_penalty > 0.0) || !std::isfinite(o.repetition_penalty)) {
    bad("repetition_penalty", "> 0 (1 is off)", o.repetition_penalty);
  }
}

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) { validate(options); }

namespace {

// The first index of the largest value (as at::argmax; NaN is not expected in logits).
int64_t arg_max(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace

// On host memory: the vocabulary is read a few times, never sorted whole (top-k and top-p
// sort only the candidates they keep, growing the sorted prefix until it holds the mass
// top_p asks for). The two reductions every token needs (the normaliser of the chosen
// token's log-probability, and greedy's argmax) are ATen's vectorised ones: as scalar
// loops (a double exp per vocabulary entry) they cost about 0.3 ms per token, most of a
// batched decode step's host work when many replies share a step.
SampledToken Sampler::sample(const at::Tensor& logits_in, const std::vector<int32_t>& context) {
  LORAKV_ASSERT(logits_in.dim() == 1 && logits_in.scalar_type() == at::kFloat, "logits must be float32 [vocab]");
  const at::Tensor logits = logits_in.contiguous();
  const float* raw = logits.data_ptr<float>();
  const int64_t vocab = logits.size(0);
  // The chosen token's log-probability needs only the normaliser, not a full log_softmax.
  const double log_normaliser = at::logsumexp(logits, 0).item<double>();
  const bool modifies_logits = options_.repetition_penalty != 1.0 || options_.temperature != 0.0;
  std::vector<float> work;
  const float* x = raw;
  if (modifies_logits) {
    work.assign(raw, raw + vocab);
    x = work.data();
  }
  if (options_.repetition_penalty != 1.0 && !context.empty()) {
    std::vector<bool> seen(static_cast<size_t>(vocab), false);
    const auto penalty = static_cast<float>(options_.repetition_penalty);
    for (int32_t t : context) {
      if (t < 0 || t >= vocab || seen[static_cast<size_t>(t)]) continue;
      seen[static_cast<size_t>(t)] = true;
      float& p = work[static_cast<size_t>(t)];
      p = p > 0 ? p / penalty : p * penalty;
    }
  }
  int64_t token = 0;
  if (options_.temperature == 0.0) {
    token = modifies_logits ? arg_max(x, vocab) : logits.argmax().item<int64_t>();  // both: the first largest
  } else {
    token = draw(work);
  }
  return {static_cast<int32_t>(token), static_cast<double>(raw[token]) - log_normaliser};
}

int64_t Sampler::draw(std::vector<float>& x) {
  const int64_t vocab = static_cast<int64_t>(x.size());
  const auto inv_t = static_cast<float>(1.0 / options_.temperature);
  for (float& v : x) v *= inv_t;
  int64_t keep = options_.top_k > 0 ? std::min(vocab, options_.top_k) : vocab;
  // Candidates by descending logit (ties by lower id, as a stable sort); only a prefix of
  // `sorted` is ordered.
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  auto before = [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  int64_t sorted = std::min<int64_t>(keep, 64);
  std::partial_sort(order.begin(), order.begin() + sorted, order.end(), before);
  const float peak = x[order[0]];
  // Softmax over the kept candidates: the normaliser needs all of them.
  if (keep < vocab) std::nth_element(order.begin() + sorted, order.begin() + keep, order.end(), before);
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += std::exp(static_cast<double>(x[order[i]] - peak));
  auto prob = [&](int64_t i) { return std::exp(static_cast<double>(x[order[i]] - peak)) / total; };
  if (options_.top_p < 1.0) {
    // Smallest prefix whose mass reaches top_p; always at least one token.
    double mass = 0;
    int64_t i = 0;
    for (;; ++i) {
      if (i == sorted) {  // extend the ordered prefix
        const int64_t more = std::min(keep, sorted * 4);
        std::partial_sort(order.begin() + sorted, order.begin() + more, order.begin() + keep, before);
        sorted = more;
      }
      mass += prob(i);
      if (mass >= options_.top_p || i + 1 == keep) break;
    }
    keep = i + 1;
    total *= mass;  // renormalise over the prefix
  }
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double u = uniform(rng_);
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    if (i == sorted) {
      std::partial_sort(order.begin() + sorted, order.begin() + keep, order.begin() + keep, before);
      sorted = keep;
    }
    acc += prob(i);
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

}  // namespace lorakv::runtime

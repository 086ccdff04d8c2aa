// runtime/sampler.cpp: logits processing in vLLM's order (logit bias, the penalties, then
// Hugging Face's temperature, top-k, top-p, min-p), then a draw from what remains.
#include "lorakv/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "lorakv/common/errors.h"

namespace lorakv::runtime {

void validate(const SamplingOptions& o, int64_t vocab_size) {
  auto bad = [](const char* key, const std::string& expected, double found) {
    throw ConfigError("invalid sampling option", {"", key, expected, std::to_string(found), ""});
  };
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature)) bad("temperature", ">= 0 (0 is greedy)", o.temperature);
  if (o.top_k < 0) bad("top_k", ">= 0 (0 keeps all)", static_cast<double>(o.top_k));
  if (!(o.top_p > 0.0 && o.top_p <= 1.0)) bad("top_p", "in (0, 1]", o.top_p);
  if (!(o.repetition_penalty > 0.0) || !std::isfinite(o.repetition_penalty)) {
    bad("repetition_penalty", "> 0 (1 is off)", o.repetition_penalty);
  }
  if (!(o.min_p >= 0.0 && o.min_p <= 1.0)) bad("min_p", "in [0, 1] (0 keeps all)", o.min_p);
  if (!(std::fabs(o.presence_penalty) <= 2.0)) bad("presence_penalty", "in [-2, 2]", o.presence_penalty);
  if (!(std::fabs(o.frequency_penalty) <= 2.0)) bad("frequency_penalty", "in [-2, 2]", o.frequency_penalty);
  for (const auto& [token, bias] : o.logit_bias) {
    if (token < 0 || (vocab_size > 0 && token >= vocab_size)) {
      throw ConfigError("logit_bias names a token outside the vocabulary",
                        {"", "logit_bias", vocab_size > 0 ? "ids 0.." + std::to_string(vocab_size - 1) : "ids >= 0",
                         std::to_string(token), ""});
    }
    if (!(std::fabs(bias) <= 100.0)) bad("logit_bias", "biases in [-100, 100]", bias);
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
SampledToken Sampler::sample(const at::Tensor& logits_in, const std::vector<int32_t>& context, size_t reply_start) {
  LORAKV_ASSERT(logits_in.dim() == 1 && logits_in.scalar_type() == at::kFloat, "logits must be float32 [vocab]");
  const at::Tensor logits = logits_in.contiguous();
  const float* raw = logits.data_ptr<float>();
  const int64_t vocab = logits.size(0);
  // The chosen token's log-probability needs only the normaliser, not a full log_softmax.
  const double log_normaliser = at::logsumexp(logits, 0).item<double>();
  const bool modifies_logits = options_.repetition_penalty != 1.0 || options_.temperature != 0.0 ||
                               options_.presence_penalty != 0.0 || options_.frequency_penalty != 0.0 ||
                               !options_.logit_bias.empty();
  std::vector<float> work;
  const float* x = raw;
  if (modifies_logits) {
    work.assign(raw, raw + vocab);
    adjust(work, context, reply_start);
    x = work.data();
  }
  int64_t token = 0;
  if (options_.temperature == 0.0) {
    token = modifies_logits ? arg_max(x, vocab) : logits.argmax().item<int64_t>();  // both: the first largest
  } else {
    token = draw(work);
  }
  return {static_cast<int32_t>(token), static_cast<double>(raw[token]) - log_normaliser};
}

void Sampler::adjust(std::vector<float>& x, const std::vector<int32_t>& context, size_t reply_start) const {
  const auto vocab = static_cast<int64_t>(x.size());
  for (const auto& [token, bias] : options_.logit_bias) {
    if (token < vocab) x[static_cast<size_t>(token)] += static_cast<float>(bias);
  }
  if (options_.repetition_penalty != 1.0 && !context.empty()) {
    std::vector<bool> seen(static_cast<size_t>(vocab), false);
    const auto penalty = static_cast<float>(options_.repetition_penalty);
    for (int32_t t : context) {
      if (t < 0 || t >= vocab || seen[static_cast<size_t>(t)]) continue;
      seen[static_cast<size_t>(t)] = true;
      float& p = x[static_cast<size_t>(t)];
      p = p > 0 ? p / penalty : p * penalty;
    }
  }
  if (options_.presence_penalty == 0.0 && options_.frequency_penalty == 0.0) return;
  std::map<int32_t, int64_t> counts;  // the reply's tokens: a few hundred at most
  for (size_t i = std::min(reply_start, context.size()); i < context.size(); ++i) {
    if (context[i] >= 0 && context[i] < vocab) ++counts[context[i]];
  }
  for (const auto& [t, n] : counts) {
    x[static_cast<size_t>(t)] -= static_cast<float>(options_.presence_penalty + options_.frequency_penalty * static_cast<double>(n));
  }
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
  if (options_.min_p > 0.0) {
    // Tokens below min_p times the likeliest's probability go. They are the least likely,
    // so a stable partition keeps the ordered prefix's kept part at the front, in order.
    const float cut = peak + static_cast<float>(std::log(options_.min_p));
    const auto kept_end = std::stable_partition(order.begin(), order.begin() + keep, [&](int32_t t) { return x[t] >= cut; });
    keep = std::max<int64_t>(1, kept_end - order.begin());
    sorted = std::min(sorted, keep);
    total = 0;
    for (int64_t i = 0; i < keep; ++i) total += std::exp(static_cast<double>(x[order[i]] - peak));
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

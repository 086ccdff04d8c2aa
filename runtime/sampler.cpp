// runtime/sampler.cpp: logits processing in Hugging Face's order (repetition penalty,
// temperature, top-k, top-p), then a draw from the remaining distribution.
#include "runtime/sampler.h"

#include <cmath>

#include "common/errors.h"

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

SampledToken Sampler::sample(const at::Tensor& logits, const std::vector<int32_t>& context) {
  LORAKV_ASSERT(logits.dim() == 1 && logits.scalar_type() == at::kFloat, "logits must be float32 [vocab]");
  // The chosen token's log-probability needs only the normaliser, not a full log_softmax.
  const double log_normaliser = at::logsumexp(logits, 0).item<double>();
  const bool modifies_logits = options_.repetition_penalty != 1.0 || options_.temperature != 0.0;
  at::Tensor x = modifies_logits ? logits.clone() : logits;
  const int64_t vocab = x.size(0);

  if (options_.repetition_penalty != 1.0 && !context.empty()) {
    float* p = x.data_ptr<float>();
    std::vector<bool> seen(static_cast<size_t>(vocab), false);
    const auto penalty = static_cast<float>(options_.repetition_penalty);
    for (int32_t t : context) {
      if (t < 0 || t >= vocab || seen[static_cast<size_t>(t)]) continue;
      seen[static_cast<size_t>(t)] = true;
      p[t] = p[t] > 0 ? p[t] / penalty : p[t] * penalty;
    }
  }
  int64_t token = 0;
  if (options_.temperature == 0.0) {
    token = x.argmax().item<int64_t>();
  } else {
    x.div_(options_.temperature);
    auto [sorted, order] = x.sort(/*dim=*/0, /*descending=*/true);
    int64_t keep = vocab;
    if (options_.top_k > 0) keep = std::min(keep, options_.top_k);
    at::Tensor probs = at::softmax(sorted.narrow(0, 0, keep), 0);
    if (options_.top_p < 1.0) {
      // Smallest prefix whose mass reaches top_p; always at least one token.
      at::Tensor cumulative = probs.cumsum(0);
      const int64_t below = (cumulative < options_.top_p).sum().item<int64_t>();
      keep = std::min(keep, below + 1);
      probs = probs.narrow(0, 0, keep);
      probs = probs / probs.sum();
    }
    const float* pp = probs.data_ptr<float>();
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    double u = uniform(rng_), acc = 0;
    int64_t pick = keep - 1;
    for (int64_t i = 0; i < keep; ++i) {
      acc += pp[i];
      if (u < acc) {
        pick = i;
        break;
      }
    }
    token = order[pick].item<int64_t>();
  }
  return {static_cast<int32_t>(token), logits[token].item<double>() - log_normaliser};
}

}  // namespace lorakv::runtime

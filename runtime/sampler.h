// runtime/sampler.h: turns one sequence's next-token logits into a token: greedy, or
// seeded sampling with temperature, top-k, top-p and a repetition penalty.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <random>
#include <vector>

namespace lorakv::runtime {

struct SamplingOptions {
  double temperature = 0.0;         // 0: greedy (argmax); > 0: sample from softmax(logits / T)
  int64_t top_k = 0;                // keep the k most likely tokens; 0: all
  double top_p = 1.0;               // keep the smallest set whose probability reaches p; 1: all
  double repetition_penalty = 1.0;  // > 1 discourages tokens already in the context (CTRL / HF rule)
  uint64_t seed = 0;                // sampling is reproducible for a given seed
};

// Checks ranges; throws ConfigError naming the option ("temperature", "top_p", ...).
void validate(const SamplingOptions& options);

struct SampledToken {
  int32_t token = 0;
  double logprob = 0;  // log-probability under the model's unmodified distribution
};

// One sampler per sequence: it owns that sequence's random stream, so a sequence's tokens
// do not depend on what else is in the batch. Not thread-safe.
class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);

  // logits: float32 [vocab]; context: the sequence's tokens so far (prompt + generated),
  // read only by the repetition penalty.
  SampledToken sample(const at::Tensor& logits, const std::vector<int32_t>& context);

 private:
  // Temperature, top-k, top-p and the draw over (penalised) logits `x`, modified in place.
  int64_t draw(std::vector<float>& x);

  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace lorakv::runtime

// runtime/sampler.h: turns one sequence's next-token logits into a token: greedy, or
// seeded sampling with temperature, top-k, top-p and min-p; logit bias, a repetition
// penalty (Hugging Face's) and presence and frequency penalties (OpenAI's) on either.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace lorakv::runtime {

struct SamplingOptions {
  double temperature = 0.0;         // 0: greedy (argmax); > 0: sample from softmax(logits / T)
  int64_t top_k = 0;                // keep the k most likely tokens; 0: all
  double top_p = 1.0;               // keep the smallest set whose probability reaches p; 1: all
  double min_p = 0.0;               // keep tokens at least min_p times the likeliest's probability; 0: all
  double repetition_penalty = 1.0;  // > 1 discourages tokens already in the context (CTRL / HF rule)
  // OpenAI's penalties over the reply's own tokens, in [-2, 2]: each token's logit less
  // presence_penalty once it has appeared, less frequency_penalty times its count.
  double presence_penalty = 0.0, frequency_penalty = 0.0;
  std::map<int32_t, double> logit_bias;  // token id -> added to its logit, in [-100, 100]
  uint64_t seed = 0;                     // sampling is reproducible for a given seed
};

// Checks ranges, and with vocab_size > 0 the logit-bias ids against the vocabulary; throws
// ConfigError naming the option ("temperature", "top_p", "logit_bias", ...).
void validate(const SamplingOptions& options, int64_t vocab_size = 0);

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
  // read by the repetition penalty; its tokens from reply_start on are the reply, read by
  // the presence and frequency penalties.
  SampledToken sample(const at::Tensor& logits, const std::vector<int32_t>& context, size_t reply_start = 0);

 private:
  // Logit bias and the penalties on a copy of the logits.
  void adjust(std::vector<float>& x, const std::vector<int32_t>& context, size_t reply_start) const;
  // Temperature, top-k, top-p, min-p and the draw over (adjusted) logits `x`, modified in place.
  int64_t draw(std::vector<float>& x);

  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace lorakv::runtime

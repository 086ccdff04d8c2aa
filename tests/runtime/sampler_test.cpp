// tests/runtime/sampler_test.cpp: runtime::Sampler on hand-made logits: reproducibility per
// seed, greedy and top-k=1 as argmax, temperature, top-p truncation, Hugging Face's
// repetition penalty, logit bias, presence and frequency penalties, min-p, raw
// log-probabilities, and option validation.
//
// Distribution tests draw N tokens and compare each token's frequency f with the expected
// probability q computed here in double from the definitions (never from the sampler).
// The count of a token is Binomial(N, q), so f has standard deviation sqrt(q (1 - q) / N).
// We allow 5 standard deviations: a correct sampler fails one check with probability
// 5.7e-7 (two-sided normal tail), below 1e-4 over the ~70 checks in this file. The draws are
// seeded, so the test is also deterministic; the tolerance is what makes it valid for any
// seed. The mistakes it guards against (one token too many or too few kept, no
// renormalisation, temperature applied twice or not at all, the penalty's sign rule
// inverted) move some frequency by 0.03 or more: over 8 standard deviations at N = 20000.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/sampler.h"

namespace lorakv::runtime {
namespace {

constexpr int kDraws = 20000;
constexpr double kSigmas = 5.0;

at::Tensor logits_of(const std::vector<double>& values) {
  std::vector<float> f(values.begin(), values.end());
  return at::tensor(f, at::kFloat);
}

// log(p) per token: logits whose softmax is exactly p (p sums to 1).
std::vector<double> log_of(const std::vector<double>& p) {
  std::vector<double> out;
  for (double x : p) out.push_back(std::log(x));
  return out;
}

std::vector<double> softmax(const std::vector<double>& logits) {
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p;
  double sum = 0;
  for (double l : logits) sum += std::exp(l - top);
  for (double l : logits) p.push_back(std::exp(l - top) / sum);
  return p;
}

size_t argmax(const std::vector<double>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Frequencies of each token over `n` draws from one sampler.
std::vector<double> frequencies(const SamplingOptions& options, const std::vector<double>& logits,
                                const std::vector<int32_t>& context = {}, int n = kDraws) {
  Sampler sampler(options);
  const at::Tensor x = logits_of(logits);
  std::vector<double> count(logits.size(), 0.0);
  for (int i = 0; i < n; ++i) {
    const int32_t t = sampler.sample(x, context).token;
    EXPECT_GE(t, 0);
    EXPECT_LT(t, static_cast<int32_t>(logits.size()));
    count[static_cast<size_t>(t)] += 1;
  }
  for (double& c : count) c /= n;
  return count;
}

// Every frequency within the binomial tolerance of `expected`; tokens with q = 0 never drawn.
void expect_matches(const std::vector<double>& freq, const std::vector<double>& expected, int n = kDraws) {
  ASSERT_EQ(freq.size(), expected.size());
  for (size_t t = 0; t < freq.size(); ++t) {
    const double q = expected[t];
    if (q == 0.0) {
      EXPECT_EQ(freq[t], 0.0) << "token " << t << " must be cut off";
      continue;
    }
    const double tolerance = kSigmas * std::sqrt(q * (1 - q) / n);
    EXPECT_NEAR(freq[t], q, tolerance) << "token " << t;
  }
}

// Six tokens with probabilities 0.40, 0.25, 0.15, 0.10, 0.06, 0.04, stored out of order
// (token id -> probability) so the sampler's sort matters.
const std::vector<double> kProbs = {0.10, 0.40, 0.04, 0.25, 0.06, 0.15};

TEST(Sampler, SameSeedGivesTheSameTokens) {
  SamplingOptions o;
  o.temperature = 1.0;
  o.seed = 1234;
  Sampler a(o), b(o);
  const at::Tensor flat = at::zeros({1000}, at::kFloat);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(a.sample(flat, {}).token, b.sample(flat, {}).token) << "draw " << i;
}

TEST(Sampler, DifferentSeedsGiveDifferentTokens) {
  // On a flat distribution over V = 1000 tokens two independent streams agree at a given
  // draw with probability 1/V: over 300 draws about 0.3 agreements are expected, and 8 or
  // more have probability about 1e-9. Identical streams would agree 300 times.
  SamplingOptions o;
  o.temperature = 1.0;
  const at::Tensor flat = at::zeros({1000}, at::kFloat);
  o.seed = 1;
  Sampler a(o);
  o.seed = 2;
  Sampler b(o);
  int agree = 0;
  std::vector<int32_t> seen;
  for (int i = 0; i < 300; ++i) {
    const int32_t ta = a.sample(flat, {}).token;
    agree += ta == b.sample(flat, {}).token;
    seen.push_back(ta);
  }
  EXPECT_LT(agree, 8);
  // And one stream really spreads over the vocabulary (about 259 distinct of 300 expected).
  std::sort(seen.begin(), seen.end());
  EXPECT_GT(std::unique(seen.begin(), seen.end()) - seen.begin(), 200);
}

TEST(Sampler, TemperatureZeroIsArgmax) {
  const std::vector<double> logits = {0.3, -1.0, 2.5, 2.4, 0.0, -7.0, 1.9};
  for (uint64_t seed : {0u, 1u, 99u}) {
    SamplingOptions o;
    o.seed = seed;
    o.top_k = 3;    // ignored when greedy
    o.top_p = 0.5;  // ignored when greedy
    Sampler s(o);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits_of(logits), {}).token, 2);
  }
}

TEST(Sampler, TopKOneIsArgmaxForAnyTemperature) {
  const std::vector<double> logits = {0.3, -1.0, 2.4, 2.5, 0.0, -7.0, 1.9};
  for (double temperature : {0.01, 0.7, 1.0, 5.0, 100.0}) {
    SamplingOptions o;
    o.temperature = temperature;
    o.top_k = 1;
    o.seed = 7;
    Sampler s(o);
    for (int i = 0; i < 200; ++i) ASSERT_EQ(s.sample(logits_of(logits), {}).token, 3) << "T = " << temperature;
  }
}

TEST(Sampler, TemperatureOneSamplesTheSoftmax) {
  SamplingOptions o;
  o.temperature = 1.0;
  o.seed = 11;
  expect_matches(frequencies(o, log_of(kProbs)), kProbs);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  // softmax(log p / T) = p^(1/T) / sum p^(1/T).
  for (double temperature : {0.5, 2.0}) {
    std::vector<double> expected;
    double sum = 0;
    for (double p : kProbs) sum += std::pow(p, 1 / temperature);
    for (double p : kProbs) expected.push_back(std::pow(p, 1 / temperature) / sum);
    SamplingOptions o;
    o.temperature = temperature;
    o.seed = 12;
    SCOPED_TRACE("T = " + std::to_string(temperature));
    expect_matches(frequencies(o, log_of(kProbs)), expected);
  }
}

TEST(Sampler, TopKKeepsTheKMostLikelyRenormalised) {
  // k = 3 keeps 0.40, 0.25, 0.15 (tokens 1, 3, 5) with mass 0.80.
  SamplingOptions o;
  o.temperature = 1.0;
  o.top_k = 3;
  o.seed = 13;
  expect_matches(frequencies(o, log_of(kProbs)), {0, 0.40 / 0.80, 0, 0.25 / 0.80, 0, 0.15 / 0.80});
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  // Sorted: 0.40, 0.65, 0.80, 0.90, 0.96, 1.00 cumulative. The smallest prefix reaching p:
  //   p = 0.64 -> {0.40, 0.25}          (0.65 >= 0.64)
  //   p = 0.70 -> {0.40, 0.25, 0.15}    (0.65 <  0.70 <= 0.80)
  //   p = 0.95 -> five tokens           (0.90 <  0.95 <= 0.96)
  //   p = 0.30 -> {0.40} alone          (the first token already reaches p)
  // Values stay at least 0.01 away from every cumulative sum, far beyond float32 rounding.
  struct Case {
    double p;
    std::vector<double> expected;
  };
  const std::vector<Case> cases = {
      {0.64, {0, 0.40 / 0.65, 0, 0.25 / 0.65, 0, 0}},
      {0.70, {0, 0.40 / 0.80, 0, 0.25 / 0.80, 0, 0.15 / 0.80}},
      {0.95, {0.10 / 0.96, 0.40 / 0.96, 0, 0.25 / 0.96, 0.06 / 0.96, 0.15 / 0.96}},
      {0.30, {0, 1, 0, 0, 0, 0}},
  };
  for (const Case& c : cases) {
    SamplingOptions o;
    o.temperature = 1.0;
    o.top_p = c.p;
    o.seed = 14;
    SCOPED_TRACE("top_p = " + std::to_string(c.p));
    expect_matches(frequencies(o, log_of(kProbs)), c.expected);
  }
}

TEST(Sampler, TopPAppliesAfterTemperatureAndTopK) {
  // Hugging Face's order: temperature, then top-k, then top-p on the renormalised top-k.
  // T = 0.5 squares the probabilities: 0.16, 0.0625, 0.0225, 0.01, 0.0036, 0.0016. Top-k = 3
  // keeps the first three: 0.16/0.245 = 0.6531, 0.0625/0.245 = 0.2551, 0.0225/0.245 = 0.0918.
  // Top-p = 0.88 then keeps two (0.6531 < 0.88 <= 0.9082): 0.16/0.2225, 0.0625/0.2225.
  // Other orders keep three: top-p over all six tempered tokens (cumulative 0.615, 0.855,
  // 0.941) or top-p before the temperature (0.5, 0.8125, 1 over the top three).
  SamplingOptions o;
  o.temperature = 0.5;
  o.top_k = 3;
  o.top_p = 0.88;
  o.seed = 15;
  expect_matches(frequencies(o, log_of(kProbs)), {0, 0.16 / 0.2225, 0, 0.0625 / 0.2225, 0, 0});
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  // Hugging Face's RepetitionPenaltyLogitsProcessor with penalty 2 on tokens {0, 1}:
  //   3.0 -> 1.5 (positive: divided), so token 2 (2.0) becomes the argmax;
  SamplingOptions o;
  o.repetition_penalty = 2.0;
  {
    Sampler s(o);
    EXPECT_EQ(s.sample(logits_of({3.0, 0.1, 2.0}), {}).token, 0) << "no context, no penalty";
    EXPECT_EQ(s.sample(logits_of({3.0, 0.1, 2.0}), {0, 1}).token, 2);
  }
  //   -0.5 -> -1.0 (negative: multiplied), so token 1 (-0.8) becomes the argmax. Dividing
  //   it instead (-0.25) would keep token 0.
  {
    Sampler s(o);
    EXPECT_EQ(s.sample(logits_of({-0.5, -0.8, -3.0}), {}).token, 0);
    EXPECT_EQ(s.sample(logits_of({-0.5, -0.8, -3.0}), {0}).token, 1);
  }
}

TEST(Sampler, RepetitionPenaltyShapesTheSampledDistribution) {
  // Penalty 1.5, context {0, 2, 2, 3}: each seen token is penalised once, however often it
  // occurs (HF gathers then scatters). By hand:
  //   token 0:  2.0 / 1.5 = 1.3333   token 1: 0.5 (unseen)
  //   token 2: -1.0 * 1.5 = -1.5     token 3: 1.2 / 1.5 = 0.8     token 4: 1.0 (unseen)
  const std::vector<double> raw = {2.0, 0.5, -1.0, 1.2, 1.0};
  const std::vector<double> penalised = {2.0 / 1.5, 0.5, -1.5, 0.8, 1.0};
  SamplingOptions o;
  o.temperature = 1.0;
  o.repetition_penalty = 1.5;
  o.seed = 16;
  expect_matches(frequencies(o, raw, {0, 2, 2, 3}), softmax(penalised));
}

TEST(Sampler, LogprobIsUnderTheUnmodifiedDistribution) {
  const std::vector<double> raw = {1.5, -0.3, 0.7, 2.2, -4.0, 0.0, 1.1};
  const std::vector<double> p = softmax(raw);
  // Greedy, then sampling with every processor active: the reported log-probability is
  // always log_softmax(raw logits)[token], not that of the processed distribution.
  SamplingOptions greedy;
  {
    Sampler s(greedy);
    const SampledToken t = s.sample(logits_of(raw), {});
    EXPECT_EQ(t.token, static_cast<int32_t>(argmax(raw)));
    EXPECT_NEAR(t.logprob, std::log(p[3]), 1e-5);
  }
  SamplingOptions o;
  o.temperature = 0.7;
  o.top_k = 4;
  o.top_p = 0.9;
  o.repetition_penalty = 1.3;
  o.seed = 17;
  Sampler s(o);
  for (int i = 0; i < 50; ++i) {
    const SampledToken t = s.sample(logits_of(raw), {3, 0});
    EXPECT_NEAR(t.logprob, std::log(p[static_cast<size_t>(t.token)]), 1e-5) << "token " << t.token;
  }
}

TEST(Sampler, InvalidOptionsNameTheOption) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* option;
    SamplingOptions options;
  };
  std::vector<Case> cases;
  auto with = [](auto set) {
    SamplingOptions o;
    set(o);
    return o;
  };
  for (double t : {-0.1, nan, inf}) {
    cases.push_back({"temperature", with([&](SamplingOptions& o) { o.temperature = t; })});
  }
  cases.push_back({"top_k", with([](SamplingOptions& o) { o.top_k = -1; })});
  for (double p : {0.0, -0.5, 1.01, nan}) cases.push_back({"top_p", with([&](SamplingOptions& o) { o.top_p = p; })});
  for (double r : {0.0, -1.0, nan, inf}) {
    cases.push_back({"repetition_penalty", with([&](SamplingOptions& o) { o.repetition_penalty = r; })});
  }
  for (double m : {-0.1, 1.5, nan}) cases.push_back({"min_p", with([&](SamplingOptions& o) { o.min_p = m; })});
  for (double p : {-2.5, 2.01, nan}) {
    cases.push_back({"presence_penalty", with([&](SamplingOptions& o) { o.presence_penalty = p; })});
    cases.push_back({"frequency_penalty", with([&](SamplingOptions& o) { o.frequency_penalty = p; })});
  }
  cases.push_back({"logit_bias", with([](SamplingOptions& o) { o.logit_bias[3] = 100.5; })});
  cases.push_back({"logit_bias", with([](SamplingOptions& o) { o.logit_bias[-1] = 1.0; })});
  for (const Case& c : cases) {
    try {
      Sampler s(c.options);
      ADD_FAILURE() << c.option << ": no error";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(c.option), std::string::npos) << e.what();
      EXPECT_EQ(e.context().key, c.option);
    }
    EXPECT_THROW(validate(c.options), ConfigError) << c.option;
  }
  // The edges of the valid ranges are accepted.
  SamplingOptions edge;
  edge.temperature = 0.0;
  edge.top_k = 0;
  edge.top_p = 1.0;
  edge.repetition_penalty = 1.0;
  edge.min_p = 1.0;
  edge.presence_penalty = -2.0;
  edge.frequency_penalty = 2.0;
  edge.logit_bias[9] = -100.0;
  EXPECT_NO_THROW(validate(edge, 10));
  // A logit-bias id is checked against the vocabulary when its size is known.
  try {
    validate(edge, 9);
    ADD_FAILURE() << "id 9 in a 9-token vocabulary passed";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.context().key, "logit_bias");
    EXPECT_EQ(e.context().found, "9");
  }
}

TEST(Sampler, LogitBiasMovesGreedyAndSampling) {
  const std::vector<double> raw = log_of(kProbs);  // token 1 is the argmax (0.40)
  SamplingOptions greedy;
  greedy.logit_bias[2] = 3.0;  // 0.04 * e^3 = 0.80 > 0.40: token 2 now wins
  EXPECT_EQ(Sampler(greedy).sample(logits_of(raw), {}).token, 2);
  greedy.logit_bias[2] = 2.0;  // 0.04 * e^2 = 0.30 < 0.40: token 1 still wins
  EXPECT_EQ(Sampler(greedy).sample(logits_of(raw), {}).token, 1);
  // -100 bans a token from sampling (e^-100 of its mass is left), and the sampled
  // distribution is the softmax of the biased logits, computed here in double.
  SamplingOptions o;
  o.temperature = 1.0;
  o.seed = 5;
  o.logit_bias[1] = -100.0;
  o.logit_bias[4] = 1.0;
  std::vector<double> biased = raw;
  biased[1] -= 100.0;
  biased[4] += 1.0;
  expect_matches(frequencies(o, raw), softmax(biased));
  // The reported log-probability stays the model's own.
  Sampler s(o);
  const SampledToken t = s.sample(logits_of(raw), {});
  EXPECT_NEAR(t.logprob, std::log(kProbs[static_cast<size_t>(t.token)]), 1e-5);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesReadOnlyTheReply) {
  // OpenAI's rule: logit - presence * [count > 0] - frequency * count, over the reply's
  // tokens (context[reply_start:]); the prompt's tokens are not penalised.
  const std::vector<double> raw = {2.0, 1.9, 0.0, 1.5};
  SamplingOptions o;
  o.presence_penalty = 0.05;
  o.frequency_penalty = 0.1;
  // Token 0 is in the prompt only: no penalty, greedy keeps it.
  EXPECT_EQ(Sampler(o).sample(logits_of(raw), {0, 0, 0}, /*reply_start=*/3).token, 0);
  // Token 0 once in the reply: 2.0 - 0.05 - 0.1 = 1.85 < 1.9: token 1 wins.
  EXPECT_EQ(Sampler(o).sample(logits_of(raw), {0, 0, 0}, /*reply_start=*/2).token, 1);
  // Token 0 three times in the reply and token 1 once: 2.0 - 0.35 = 1.65 against 1.9 - 0.15
  // = 1.75: token 1 wins; with a negative frequency penalty repeats are encouraged instead.
  EXPECT_EQ(Sampler(o).sample(logits_of(raw), {0, 1, 0, 0}, 0).token, 1);
  o.frequency_penalty = -0.1;
  EXPECT_EQ(Sampler(o).sample(logits_of(raw), {1, 3}, 0).token, 0);     // 1.9 - 0.05 + 0.1 = 1.95 < 2.0
  EXPECT_EQ(Sampler(o).sample(logits_of(raw), {1, 1, 3}, 0).token, 1);  // 1.9 - 0.05 + 0.2 = 2.05 > 2.0
}

TEST(Sampler, MinPKeepsTokensAboveAFractionOfTheLikeliest) {
  // min_p = 0.3 of the likeliest (0.40) keeps tokens with p >= 0.12: 0.40, 0.25 and 0.15,
  // renormalised; the others are never drawn.
  SamplingOptions o;
  o.temperature = 1.0;
  o.min_p = 0.3;
  o.seed = 11;
  std::vector<double> expected(kProbs.size(), 0.0);
  const double kept = 0.40 + 0.25 + 0.15;
  for (size_t t = 0; t < kProbs.size(); ++t) {
    if (kProbs[t] >= 0.12) expected[t] = kProbs[t] / kept;
  }
  expect_matches(frequencies(o, log_of(kProbs)), expected);
  // After top-p: top_p = 0.5 keeps 0.40 and 0.25; min_p = 0.7 (p >= 0.28) then keeps 0.40.
  o.top_p = 0.5;
  o.min_p = 0.7;
  std::vector<double> only_first(kProbs.size(), 0.0);
  only_first[1] = 1.0;
  expect_matches(frequencies(o, log_of(kProbs)), only_first);
}

}  // namespace
}  // namespace lorakv::runtime

// tests/runtime/reply_decoder_test.cpp: runtime::ReplyDecoder on the real vocabulary with
// hand-made logits (each test forces the tokens it needs): the model's end tokens and the
// request's stop ids, stop strings never streamed in part, a character cut at max_tokens,
// top log-probabilities against a double-precision log-softmax, the prefix constraint and
// the rules' checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/formats/unicode.h"
#include "lorakv/runtime/output_prefixes.h"
#include "lorakv/runtime/reply_decoder.h"
#include "tests/support/model_tokenizer.h"

namespace lorakv::runtime {
namespace {

class ReplyDecoderVocabulary : public ::testing::Test {
 protected:
  static const formats::BpeTokenizer& tokenizer() { return lorakv::testing::model_tokenizer(); }

  // float32 [vocab]: `token` far ahead of every other.
  static at::Tensor forcing(int32_t token) {
    at::Tensor x = at::zeros({tokenizer().vocab_size()}, at::kFloat);
    x[token] = 30.0f;
    return x;
  }
  static int32_t id(const std::string& text) {
    const std::optional<int32_t> found = tokenizer().token_id(text);
    EXPECT_TRUE(found.has_value()) << text;
    return found.value_or(0);
  }
  // Feeds `tokens` until the decoder ends; returns the pieces.
  static std::vector<std::string> feed(ReplyDecoder& d, const std::vector<int32_t>& tokens) {
    std::vector<std::string> pieces;
    for (int32_t t : tokens) {
      if (d.done()) break;
      const DecodedToken out = d.next(forcing(t));
      EXPECT_EQ(out.token, t);
      pieces.push_back(out.text);
    }
    return pieces;
  }
};

TEST_F(ReplyDecoderVocabulary, EndsOnEveryModelEndTokenAndOnTheRequestsStopIds) {
  const std::vector<int32_t>& ends = tokenizer().end_of_generation_ids();
  EXPECT_NE(std::find(ends.begin(), ends.end(), id("<|im_end|>")), ends.end());
  EXPECT_NE(std::find(ends.begin(), ends.end(), id("<|endoftext|>")), ends.end());
  EXPECT_EQ(std::find(ends.begin(), ends.end(), id("<|im_start|>")), ends.end());
  const int32_t hi = tokenizer().encode("Hi").front();
  for (int32_t end : {id("<|im_end|>"), id("<|endoftext|>")}) {
    ReplyRules rules;
    ReplyDecoder d(rules, &tokenizer(), {});
    const std::vector<std::string> pieces = feed(d, {hi, end, hi});
    ASSERT_TRUE(d.done());
    EXPECT_EQ(*d.finish(), FinishReason::kStopToken);
    EXPECT_EQ(d.tokens(), (std::vector<int32_t>{hi, end}));  // the end token is kept, not shown
    EXPECT_EQ(d.text(), "Hi");
    // ignore_end_tokens runs through it.
    rules.ignore_end_tokens = true;
    ReplyDecoder through(rules, &tokenizer(), {});
    feed(through, {hi, end, hi});
    EXPECT_FALSE(through.done());
    EXPECT_EQ(through.tokens().size(), 3u);
  }
  ReplyRules own;
  own.stop_token_ids = {hi};
  ReplyDecoder d(own, &tokenizer(), {});
  feed(d, {tokenizer().encode(" there").front(), hi});
  EXPECT_EQ(d.finish(), FinishReason::kStopToken);
  EXPECT_EQ(d.text(), " there");
}

TEST_F(ReplyDecoderVocabulary, AStopStringIsNeverStreamedInPart) {
  ReplyRules rules;
  rules.stop_strings = {"Observation:"};
  ReplyDecoder d(rules, &tokenizer(), {});
  const std::vector<int32_t> ids = tokenizer().encode("Lookup[x]\nObservation: 42");
  const std::vector<std::string> pieces = feed(d, ids);
  EXPECT_EQ(d.finish(), FinishReason::kStopString);
  std::string streamed;
  for (const std::string& p : pieces) {
    EXPECT_EQ(p.find("Obs"), std::string::npos) << p;
    streamed += p;
  }
  EXPECT_EQ(streamed, "Lookup[x]\n");
  EXPECT_EQ(d.text(), streamed);
  EXPECT_LT(d.tokens().size(), ids.size());  // it ended at the stop string, before " 42"
}

TEST_F(ReplyDecoderVocabulary, ACharacterCutAtMaxTokensEndsAsOneReplacementCharacter) {
  const std::vector<int32_t> ids = tokenizer().encode("\xF0\x9F\x99\x82");  // U+1F642, byte tokens
  ASSERT_GE(ids.size(), 2u) << "the test needs a character spelled by several tokens";
  ReplyRules rules;
  rules.max_tokens = 1;
  ReplyDecoder d(rules, &tokenizer(), {});
  const std::vector<std::string> pieces = feed(d, ids);
  EXPECT_EQ(d.finish(), FinishReason::kLength);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0], "\xEF\xBF\xBD");
  // Whole, it comes out whole, in the piece of its last token.
  rules.max_tokens = static_cast<int64_t>(ids.size());
  ReplyDecoder whole(rules, &tokenizer(), {});
  const std::vector<std::string> all = feed(whole, ids);
  EXPECT_EQ(all.back(), "\xF0\x9F\x99\x82");
  EXPECT_EQ(whole.text(), "\xF0\x9F\x99\x82");
}

// Byte tokens a model may emit in any order: a lone continuation byte, a lead byte cut by
// the next character, a three-byte lead cut by the end. Every piece is valid UTF-8, each
// ill-formed part one U+FFFD, as transformers' decode (errors="replace") gives.
TEST_F(ReplyDecoderVocabulary, AdversarialByteTokensComeOutAsValidUtf8) {
  const std::string fffd = "\xEF\xBF\xBD";
  auto byte = [](uint8_t b) {
    const int32_t t = tokenizer().byte_token(b);
    EXPECT_GE(t, 0) << "no token for byte " << static_cast<int>(b);
    return t;
  };
  const int32_t a = tokenizer().encode("A").front();
  ReplyRules rules;
  rules.max_tokens = 6;
  ReplyDecoder d(rules, &tokenizer(), {});
  const std::vector<std::string> pieces = feed(d, {byte(0x80), a, byte(0xE5), a, byte(0xE5), byte(0xB0)});
  EXPECT_EQ(d.finish(), FinishReason::kLength);
  std::string all;
  for (const std::string& p : pieces) {
    EXPECT_EQ(formats::utf8_replace_invalid(p), p) << "a piece is not valid UTF-8";
    all += p;
  }
  EXPECT_EQ(all, fffd + "A" + fffd + "A" + fffd);
}

TEST_F(ReplyDecoderVocabulary, TopLogprobsAreTheLikeliestTokensInOrder) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> raw(static_cast<size_t>(tokenizer().vocab_size()));
  for (float& v : raw) v = normal(rng);
  const at::Tensor logits = at::tensor(raw, at::kFloat);
  // The reference in double: log-softmax, ranks.
  double top = *std::max_element(raw.begin(), raw.end()), sum = 0;
  for (float v : raw) sum += std::exp(static_cast<double>(v) - top);
  const double log_z = top + std::log(sum);
  std::vector<int32_t> order(raw.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::partial_sort(order.begin(), order.begin() + 6, order.end(), [&](int32_t a, int32_t b) { return raw[a] > raw[b]; });

  ReplyRules rules;
  rules.logprobs = true;
  rules.top_logprobs = 5;
  ReplyDecoder d(rules, &tokenizer(), {});
  const DecodedToken out = d.next(logits);
  EXPECT_EQ(out.token, order[0]);  // greedy
  ASSERT_EQ(out.top.size(), 5u);
  // float32 log-softmax over 49k entries: the sum's rounding is about 1e-6 relative.
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(out.top[i].token, order[i]) << i;
    EXPECT_NEAR(out.top[i].logprob, raw[static_cast<size_t>(order[i])] - log_z, 1e-4) << i;
  }
  EXPECT_NEAR(out.logprob, raw[static_cast<size_t>(order[0])] - log_z, 1e-4);
  EXPECT_NEAR(out.runner_up_logprob, raw[static_cast<size_t>(order[1])] - log_z, 1e-4);
}

TEST_F(ReplyDecoderVocabulary, APrefixConstraintPicksAllowedTokensAndReportsTheModelsLogprob) {
  ReplyRules rules;
  rules.allowed_prefixes = {"Finish["};
  ReplyDecoder d(rules, &tokenizer(), {});
  const int32_t thought = tokenizer().encode("Thought").front();
  at::Tensor logits = forcing(thought);  // the model wants "Thought"'s first token; the constraint forbids it
  const DecodedToken out = d.next(logits);
  EXPECT_NE(out.token, thought);
  EXPECT_EQ(std::string("Finish[").rfind(tokenizer().token_piece(out.token), 0), 0u) << tokenizer().token_piece(out.token);
  // Under the model's own distribution the picked token is about e^-30 as likely as "Th...".
  EXPECT_NEAR(out.logprob, (logits[out.token] - at::logsumexp(logits, 0)).item<double>(), 1e-4);
  EXPECT_LT(out.logprob, -25.0);
}

TEST_F(ReplyDecoderVocabulary, BadRulesAreRefusedNamingTheKey) {
  auto key_of = [](const ReplyRules& rules, const formats::BpeTokenizer* tok) -> std::string {
    try {
      ReplyDecoder d(rules, tok, {});
    } catch (const ConfigError& e) {
      return e.context().key;
    }
    return "(accepted)";
  };
  ReplyRules r;
  r.top_logprobs = 21;
  r.logprobs = true;
  EXPECT_EQ(key_of(r, &tokenizer()), "top_logprobs");
  r.top_logprobs = 3;
  r.logprobs = false;
  EXPECT_EQ(key_of(r, &tokenizer()), "top_logprobs");
  r = {};
  r.stop_token_ids = {tokenizer().vocab_size()};
  EXPECT_EQ(key_of(r, &tokenizer()), "stop_token_ids");
  r = {};
  r.max_tokens = -1;
  EXPECT_EQ(key_of(r, &tokenizer()), "max_tokens");
  r = {};
  r.sampling.logit_bias[tokenizer().vocab_size()] = 1.0;
  EXPECT_EQ(key_of(r, &tokenizer()), "logit_bias");
  r = {};
  r.stop_strings = {"x"};
  EXPECT_EQ(key_of(r, nullptr), "stop_strings");
  r = {};
  r.max_tokens = 0;  // no reply: ended at once
  EXPECT_TRUE(ReplyDecoder(r, &tokenizer(), {}).done());
}

// Random walks through the allowed tokens: every walk ends on one of the prefixes (or past
// it), and each allowed set holds only tokens that keep the text on a prefix.
TEST_F(ReplyDecoderVocabulary, PrefixConstraintSpellsOnlyTheGivenPrefixes) {
  const std::vector<std::string> prefixes = {"Lookup[", "Calculate[", "Finish["};
  std::mt19937 rng(7);
  std::map<std::string, int> reached;
  for (int walk = 0; walk < 60; ++walk) {
    OutputPrefixes constraint(tokenizer(), prefixes);
    int steps = 0;
    while (constraint.active()) {
      const std::vector<int32_t> allowed = constraint.allowed();
      ASSERT_FALSE(allowed.empty());
      constraint.accept(allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)]);
      ASSERT_LT(++steps, 16) << "a walk did not reach a prefix: " << constraint.text();
    }
    const std::string& text = constraint.text();
    bool on_prefix = false;
    for (const std::string& p : prefixes) {
      if (text.compare(0, p.size(), p) == 0) {
        on_prefix = true;
        ++reached[p];
      }
    }
    EXPECT_TRUE(on_prefix) << text;
  }
  EXPECT_EQ(reached.size(), prefixes.size()) << "some prefix was never reached in 60 walks";
  // The first step allows single letters and whole words, never another word.
  OutputPrefixes first(tokenizer(), prefixes);
  const std::vector<int32_t> allowed = first.allowed();
  auto allows = [&](const std::string& piece) {
    const std::optional<int32_t> id = tokenizer().token_id(piece);
    return id && std::find(allowed.begin(), allowed.end(), *id) != allowed.end();
  };
  EXPECT_TRUE(allows("L"));
  EXPECT_TRUE(allows("Look"));
  EXPECT_TRUE(allows("F"));
  EXPECT_TRUE(allows("C"));
  EXPECT_FALSE(allows("Thought"));
  EXPECT_FALSE(allows("<|im_end|>"));
}

TEST_F(ReplyDecoderVocabulary, PrefixConstraintEndsOnceAWholePrefixIsWritten) {
  OutputPrefixes constraint(tokenizer(), {"Finish["});
  EXPECT_TRUE(constraint.active());
  for (int32_t id : tokenizer().encode("Finish[26]")) constraint.accept(id);
  EXPECT_FALSE(constraint.active());
  EXPECT_FALSE(OutputPrefixes(tokenizer(), {}).active());
  EXPECT_THROW(OutputPrefixes(tokenizer(), {"Lookup[", ""}), ConfigError);
}

}  // namespace
}  // namespace lorakv::runtime

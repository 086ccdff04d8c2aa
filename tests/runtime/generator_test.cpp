// tests/runtime/generator_test.cpp: runtime::generate end to end on the real SmolLM2 model
// (short runs, at most 20 tokens): a stop string spanning a token boundary of the greedy
// continuation, and streaming events that add up to the final text.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/formats/unicode.h"
#include "lorakv/runtime/generator.h"
#include "lorakv/runtime/loaded_model.h"
#include "tests/support/test_settings.h"

namespace lorakv::runtime {
namespace {

constexpr int64_t kTokens = 20;
const char* const kPrompt = "The capital of France is";

class Generator : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = lorakv::testing::test_setting("LORAKV_MODEL");
    if (!path.empty()) loaded_ = new LoadedModel(load_model(path));
  }
  static void TearDownTestSuite() {
    delete loaded_;
    loaded_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(loaded_, nullptr) << "LORAKV_MODEL is not set"; }

  static const formats::BpeTokenizer& tok() { return *loaded_->tokenizer; }
  static const LlamaModel& model() { return *loaded_->model; }

  static GenerationRequest greedy_request(std::vector<std::string> stop_strings = {}) {
    GenerationRequest r;
    r.prompt = tok().encode(kPrompt);
    r.max_tokens = kTokens;
    r.stop_strings = std::move(stop_strings);
    return r;
  }

  static LoadedModel* loaded_;
};

LoadedModel* Generator::loaded_ = nullptr;

bool is_ascii(const std::string& s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

TEST_F(Generator, StopStringAcrossATokenBoundaryEndsTheGreedyText) {
  // The greedy continuation, without stop strings, decoded by the tokenizer itself.
  const GenerationOutput greedy = generate(model(), &tok(), {greedy_request()})[0];
  ASSERT_EQ(greedy.tokens.size(), static_cast<size_t>(kTokens));
  ASSERT_EQ(greedy.finish_reason, FinishReason::kLength);
  ASSERT_EQ(greedy.text, tok().decode(greedy.tokens, /*render_special=*/false));
  std::printf("  greedy: \"%s\"\n", greedy.text.c_str());

  // A stop string made of the end of one token and the start of the next: the last two
  // bytes of token j's text and the first two of token j+1's, for the first j past the
  // second token where both pieces are ASCII with at least two bytes and the string's
  // first occurrence in the text is at that boundary.
  std::string stop;
  size_t at = 0;
  for (size_t j = 2; j + 1 < greedy.tokens.size() && stop.empty(); ++j) {
    const std::string& a = tok().token_piece(greedy.tokens[j], false);
    const std::string& b = tok().token_piece(greedy.tokens[j + 1], false);
    if (a.size() < 2 || b.size() < 2 || !is_ascii(a) || !is_ascii(b)) continue;
    const std::vector<int32_t> through_j(greedy.tokens.begin(),
                                         greedy.tokens.begin() + static_cast<std::ptrdiff_t>(j + 1));
    const size_t boundary = tok().decode(through_j, false).size();  // bytes before token j+1
    const std::string candidate = a.substr(a.size() - 2) + b.substr(0, 2);
    if (greedy.text.find(candidate) == boundary - 2) {
      stop = candidate;
      at = boundary - 2;
    }
  }
  ASSERT_FALSE(stop.empty()) << "no suitable token boundary in the greedy text";
  std::printf("  stop string: \"%s\" at byte %zu\n", stop.c_str(), at);

  const GenerationOutput stopped = generate(model(), &tok(), {greedy_request({stop})})[0];
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStopString);
  EXPECT_EQ(stopped.text, greedy.text.substr(0, at));
  // The same greedy tokens, ending with the one that completed the stop string.
  ASSERT_LE(stopped.tokens.size(), greedy.tokens.size());
  const auto prefix_end = greedy.tokens.begin() + static_cast<std::ptrdiff_t>(stopped.tokens.size());
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(greedy.tokens.begin(), prefix_end));
  const std::string through_last = tok().decode(stopped.tokens, false);
  EXPECT_NE(through_last.find(stop), std::string::npos) << "the last token completes the stop string";
  std::vector<int32_t> one_less(stopped.tokens.begin(), stopped.tokens.end() - 1);
  EXPECT_EQ(tok().decode(one_less, false).find(stop), std::string::npos) << "it stopped late";
}

TEST_F(Generator, StreamedTextAddsUpToTheFinalText) {
  // Two requests in one batch: greedy with a stop string (so text is held back and
  // released), and seeded sampling without one.
  std::vector<GenerationRequest> requests = {greedy_request({" is a", "Paris"}), greedy_request()};
  requests[1].sampling.temperature = 0.8;
  requests[1].sampling.top_p = 0.95;
  requests[1].sampling.seed = 3;
  requests[1].logprobs = true;
  std::vector<std::string> streamed(requests.size());
  std::vector<int> events(requests.size(), 0), finished(requests.size(), 0);
  std::vector<std::vector<int32_t>> tokens(requests.size());
  const std::vector<GenerationOutput> out = generate(model(), &tok(), requests, [&](const StreamEvent& e) {
    EXPECT_LT(e.request, requests.size());
    EXPECT_EQ(finished[e.request], 0) << "an event after the request finished";
    streamed[e.request] += e.token.text;
    tokens[e.request].push_back(e.token.token);
    ++events[e.request];
    finished[e.request] += e.finished();
    return true;
  });
  ASSERT_EQ(out.size(), requests.size());
  for (size_t i = 0; i < out.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    std::printf("  request %zu (%s): \"%s\"\n", i, finish_reason_name(out[i].finish_reason), out[i].text.c_str());
    EXPECT_EQ(streamed[i], out[i].text);
    EXPECT_EQ(tokens[i], out[i].tokens);
    EXPECT_EQ(events[i], static_cast<int>(out[i].tokens.size()));
    EXPECT_EQ(finished[i], 1);
    EXPECT_LE(out[i].tokens.size(), static_cast<size_t>(kTokens));
  }
  // Without a stop string the text is exactly the decoded tokens.
  if (out[1].finish_reason == FinishReason::kLength) {
    EXPECT_EQ(out[1].text, tok().decode(out[1].tokens, false));
  }
  EXPECT_EQ(out[1].logprobs.size(), out[1].tokens.size());
  for (double lp : out[1].logprobs) EXPECT_LE(lp, 0.0);
  // With stop strings: the text never contains one, and stopping means it was matched.
  for (const char* s : {" is a", "Paris"}) EXPECT_EQ(out[0].text.find(s), std::string::npos) << s;
  if (out[0].finish_reason == FinishReason::kStopString) {
    const std::string all = tok().decode(out[0].tokens, false);
    EXPECT_TRUE(all.find(" is a") != std::string::npos || all.find("Paris") != std::string::npos);
  }
}

TEST_F(Generator, TextEndingMidCharacterEndsWithAReplacementInOrder) {
  // SmolLM2 spells most emoji as several byte tokens, so a sequence cut by max_tokens
  // can end inside a character: the streaming decoder then holds those bytes until the end,
  // when they are flushed, as one U+FFFD, through the stop-string filter after the text it
  // holds back.
  GenerationRequest r = greedy_request();
  r.prompt = tok().encode("I love pizza \xF0\x9F\x8D\x95\xF0\x9F\x8D\x95 and burgers \xF0\x9F\x8D\x94");
  r.max_tokens = 8;
  const std::vector<int32_t> greedy = generate(model(), &tok(), {r})[0].tokens;
  // The first k where the text so far ends inside a character, after a complete one.
  formats::StreamingDecoder decoder(tok(), /*render_special=*/false);
  std::string complete;
  size_t k = 0;
  for (size_t i = 0; i < greedy.size() && k == 0; ++i) {
    complete += decoder.feed(greedy[i]);
    if (decoder.num_pending_bytes() > 0 && !complete.empty()) k = i + 1;
  }
  ASSERT_GT(k, 0u) << "the greedy continuation never ends mid-character: pick another prompt";
  size_t last = complete.size() - 1;  // start of the last complete character
  while (last > 0 && (static_cast<unsigned char>(complete[last]) & 0xC0) == 0x80) --last;
  // A stop string that begins with that character, so the filter holds it back to the end.
  r.max_tokens = static_cast<int64_t>(k);
  r.stop_strings = {complete.substr(last) + "\x01"};
  const std::vector<int32_t> first_k(greedy.begin(), greedy.begin() + static_cast<std::ptrdiff_t>(k));
  const GenerationOutput out = generate(model(), &tok(), {r})[0];
  EXPECT_EQ(out.tokens, first_k);
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  // Everything, in order: the held-back character, then U+FFFD for the cut one (valid
  // UTF-8, as transformers' decode gives it).
  const std::string bytes = tok().decode(first_k, false);
  EXPECT_EQ(out.text, bytes.substr(0, bytes.size() - decoder.num_pending_bytes()) + "\xEF\xBF\xBD");
  EXPECT_EQ(out.text, formats::utf8_replace_invalid(bytes));
}

// The seed decides the sample: the same seed gives the same tokens, in separate calls and
// side by side in one batch, and other seeds give other tokens (a sampler that ignored the
// seed, shared one generator between requests or fell back to greedy would fail).
TEST_F(Generator, SameSeedSameTokensThroughGenerate) {
  GenerationRequest r = greedy_request();
  r.max_tokens = 8;
  r.sampling.temperature = 1.0;
  r.sampling.seed = 42;
  const std::vector<int32_t> a = generate(model(), &tok(), {r})[0].tokens;
  const std::vector<int32_t> b = generate(model(), &tok(), {r})[0].tokens;
  EXPECT_EQ(a, b);
  const std::vector<int32_t> greedy = generate(model(), &tok(), {greedy_request()})[0].tokens;
  std::vector<GenerationRequest> batch(6, r);
  for (size_t i = 1; i < batch.size(); ++i) batch[i].sampling.seed = 42 + 1000 * static_cast<uint64_t>(i);
  batch.push_back(r);  // seed 42 again, beside the others
  const std::vector<GenerationOutput> out = generate(model(), &tok(), batch);
  EXPECT_EQ(out.front().tokens, a);
  EXPECT_EQ(out.back().tokens, a);
  int differ = 0;
  for (size_t i = 1; i + 1 < out.size(); ++i) differ += out[i].tokens != a ? 1 : 0;
  EXPECT_GE(differ, 4) << "five other seeds, temperature 1: at most one may repeat seed 42's 8 tokens";
  int not_greedy = 0;
  for (const GenerationOutput& o : out) not_greedy += o.tokens != std::vector<int32_t>(greedy.begin(), greedy.begin() + 8) ? 1 : 0;
  EXPECT_GE(not_greedy, 4);
}

}  // namespace
}  // namespace lorakv::runtime

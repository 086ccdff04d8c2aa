// runtime/reply_decoder.h: one reply, token by token: the one place that constrains the
// next token (allowed prefixes), samples it, records its log-probabilities, decodes its
// text (valid UTF-8, stop strings held back until they can no longer match) and decides
// whether the reply ends (the model's end-of-generation tokens, the request's stop ids and
// stop strings, its token limit). runtime::generate, the sessions' replies and request
// handles (agents/) all decode through it. Needs no engine: a caller hands it each
// step's logits.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lorakv/runtime/output_prefixes.h"
#include "lorakv/runtime/sampler.h"
#include "lorakv/runtime/stop_strings.h"

namespace lorakv::formats {
class BpeTokenizer;
class StreamingDecoder;
}  // namespace lorakv::formats

namespace lorakv::runtime {

// What one request asks of its reply.
struct ReplyRules {
  int64_t max_tokens = 256;               // the reply's most tokens (0: none)
  SamplingOptions sampling;               // default: greedy
  std::vector<std::string> stop_strings;  // end the reply; never in its text
  std::vector<int32_t> stop_token_ids;    // end the reply, beside the model's end tokens
  // Do not end on the model's end-of-generation tokens (vLLM's ignore_eos): what a parity
  // test against a reference that decodes a fixed number of tokens needs.
  bool ignore_end_tokens = false;
  // The reply's text must start with one of these ("Lookup[", "Finish["), whatever tokens
  // spell it. Empty: no constraint.
  std::vector<std::string> allowed_prefixes;
  bool logprobs = false;     // each token's log-probability and the best other one's
  int64_t top_logprobs = 0;  // with logprobs: this many likeliest tokens per step, 0..20
};

// Checks every rule; throws ConfigError naming the key. vocab_size > 0 also checks token ids.
void validate(const ReplyRules& rules, int64_t vocab_size);

enum class FinishReason {
  kLength,      // max_tokens (or the caller's room)
  kStopToken,   // an end-of-generation token or one of stop_token_ids (kept in the tokens)
  kStopString,  // one of stop_strings
  kCallback,    // the caller ended it (ReplyDecoder::stop)
};
const char* finish_reason_name(FinishReason reason);

struct TokenLogprob {
  int32_t token = 0;
  double logprob = 0;
};

// One decoded token.
struct DecodedToken {
  int32_t token = 0;
  // Newly printable text: valid UTF-8, nothing of a stop string; may be empty (held back,
  // or an end token).
  std::string text;
  double logprob = 0;            // under the model's distribution (no bias, penalty or constraint)
  double runner_up_logprob = 0;  // with logprobs: the likeliest other token's
  std::vector<TokenLogprob> top; // with logprobs: top_logprobs likeliest tokens, likeliest first
  std::optional<FinishReason> finish;  // set on the reply's last token
};

class ReplyDecoder {
 public:
  // `tokenizer` (it must outlive the decoder) gives the text and the model's end tokens; it
  // may be null only without stop strings and prefixes (tokens, no text). `seen`: the tokens
  // before the reply, which the repetition penalty reads. Throws ConfigError for bad rules.
  ReplyDecoder(ReplyRules rules, const formats::BpeTokenizer* tokenizer, std::vector<int32_t> seen);
  ~ReplyDecoder();
  ReplyDecoder(const ReplyDecoder&) = delete;
  ReplyDecoder& operator=(const ReplyDecoder&) = delete;

  // Whether the reply has ended (at once with max_tokens 0).
  bool done() const { return finish_.has_value(); }
  std::optional<FinishReason> finish() const { return finish_; }
  // The next token from logits: float32 [vocab]. Requires !done().
  DecodedToken next(const at::Tensor& logits);
  // Ends the reply now (the caller's reason: kCallback); what is held back is dropped.
  void stop(FinishReason reason);

  const ReplyRules& rules() const { return rules_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }  // generated ids, a final stop token included
  const std::string& text() const { return text_; }               // every piece so far

 private:
  // The reply's end after `token`, if it ends there; text_piece gets the last text.
  std::optional<FinishReason> end_after(int32_t token, std::string& text_piece);
  void record_logprobs(const at::Tensor& logits, DecodedToken& out) const;

  ReplyRules rules_;
  const formats::BpeTokenizer* tokenizer_;
  std::vector<int32_t> end_ids_;  // the model's end tokens and stop_token_ids
  Sampler sampler_;
  std::unique_ptr<formats::StreamingDecoder> decoder_;
  std::unique_ptr<StopStringFilter> stops_;
  std::unique_ptr<OutputPrefixes> prefixes_;
  std::vector<int32_t> seen_;  // before the reply, then the reply
  size_t reply_start_ = 0;
  std::vector<int32_t> tokens_;
  std::string text_;
  std::optional<FinishReason> finish_;
};

}  // namespace lorakv::runtime

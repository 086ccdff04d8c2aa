// runtime/reply_decoder.cpp: constraint, sampling, log-probabilities, text and the end of
// one reply.
#include "lorakv/runtime/reply_decoder.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "lorakv/common/errors.h"
#include "lorakv/formats/bpe_tokenizer.h"

namespace lorakv::runtime {

namespace {

constexpr int64_t kMostTopLogprobs = 20;  // OpenAI's limit

// The logits with every token but `allowed` at -inf. logits: float32 [vocab].
at::Tensor only(const at::Tensor& logits, std::vector<int32_t> allowed) {
  const at::Tensor index =
      at::from_blob(allowed.data(), {static_cast<int64_t>(allowed.size())}, at::kInt).to(at::kLong);
  at::Tensor masked = at::full_like(logits, -std::numeric_limits<float>::infinity());
  masked.index_copy_(0, index, logits.index_select(0, index));
  return masked;
}

}  // namespace

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStopToken: return "stop_token";
    case FinishReason::kStopString: return "stop_string";
    case FinishReason::kCallback: return "callback";
  }
  return "unknown";
}

void validate(const ReplyRules& r, int64_t vocab_size) {
  validate(r.sampling, vocab_size);
  if (r.max_tokens < 0) throw ConfigError("max_tokens must be 0 or more", {"", "max_tokens", ">= 0", std::to_string(r.max_tokens)});
  if (r.top_logprobs < 0 || r.top_logprobs > kMostTopLogprobs) {
    throw ConfigError("top_logprobs is out of range",
                      {"", "top_logprobs", "0.." + std::to_string(kMostTopLogprobs), std::to_string(r.top_logprobs)});
  }
  if (r.top_logprobs > 0 && !r.logprobs) {
    throw ConfigError("top_logprobs needs logprobs", {"", "top_logprobs", "", "", "set logprobs as well"});
  }
  for (int32_t id : r.stop_token_ids) {
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
      throw ConfigError("a stop token id is outside the vocabulary",
                        {"", "stop_token_ids", vocab_size > 0 ? "0.." + std::to_string(vocab_size - 1) : ">= 0",
                         std::to_string(id)});
    }
  }
}

ReplyDecoder::ReplyDecoder(ReplyRules rules, const formats::BpeTokenizer* tokenizer, std::vector<int32_t> seen)
    : rules_(std::move(rules)), tokenizer_(tokenizer), sampler_(rules_.sampling), seen_(std::move(seen)) {
  validate(rules_, tokenizer_ != nullptr ? tokenizer_->vocab_size() : 0);
  const bool needs_text = !rules_.stop_strings.empty() || !rules_.allowed_prefixes.empty();
  if (needs_text && tokenizer_ == nullptr) {
    throw ConfigError("stop strings and allowed prefixes need a tokenizer", {"", "stop_strings"});
  }
  end_ids_ = rules_.stop_token_ids;
  if (tokenizer_ != nullptr) {
    if (!rules_.ignore_end_tokens) {
      const std::vector<int32_t>& model_ends = tokenizer_->end_of_generation_ids();
      end_ids_.insert(end_ids_.end(), model_ends.begin(), model_ends.end());
    }
    decoder_ = std::make_unique<formats::StreamingDecoder>(*tokenizer_, /*render_special=*/false);
  }
  stops_ = std::make_unique<StopStringFilter>(rules_.stop_strings);
  if (!rules_.allowed_prefixes.empty()) prefixes_ = std::make_unique<OutputPrefixes>(*tokenizer_, rules_.allowed_prefixes);
  reply_start_ = seen_.size();
  if (rules_.max_tokens == 0) finish_ = FinishReason::kLength;
}

ReplyDecoder::~ReplyDecoder() = default;

DecodedToken ReplyDecoder::next(const at::Tensor& logits) {
  LORAKV_ASSERT(!done(), "ReplyDecoder::next after the reply ended");
  const bool constrained = prefixes_ && prefixes_->active();
  const SampledToken picked = sampler_.sample(constrained ? only(logits, prefixes_->allowed()) : logits, seen_, reply_start_);
  DecodedToken out;
  out.token = picked.token;
  out.logprob = picked.logprob;
  if (rules_.logprobs) {
    record_logprobs(logits, out);
  } else if (constrained) {  // the sampler's log-probability was under the constrained distribution
    out.logprob = logits[picked.token].item<double>() - at::logsumexp(logits, 0).item<double>();
  }
  seen_.push_back(picked.token);
  tokens_.push_back(picked.token);
  if (prefixes_) prefixes_->accept(picked.token);
  finish_ = end_after(picked.token, out.text);
  out.finish = finish_;
  text_ += out.text;
  return out;
}

std::optional<FinishReason> ReplyDecoder::end_after(int32_t token, std::string& piece) {
  std::optional<FinishReason> end;
  if (std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end()) {
    end = FinishReason::kStopToken;  // never shown as text
  } else if (decoder_) {
    piece = stops_->push(decoder_->feed(token));
    if (stops_->stopped()) end = FinishReason::kStopString;
  }
  if (!end && static_cast<int64_t>(tokens_.size()) >= rules_.max_tokens) end = FinishReason::kLength;
  if (end && decoder_ && !stops_->stopped()) {
    // What is held back goes out now: a cut character as U+FFFD, then the filter's text (no
    // stop string can complete any more). Two statements: the flush reaches the filter
    // before finish() empties it.
    piece += stops_->push(decoder_->flush());
    piece += stops_->finish();
    if (stops_->stopped()) end = FinishReason::kStopString;
  }
  return end;
}

void ReplyDecoder::record_logprobs(const at::Tensor& logits, DecodedToken& out) const {
  const at::Tensor log_probs = at::log_softmax(logits, 0);  // float32 [vocab]
  out.logprob = log_probs[out.token].item<double>();
  const int64_t k = std::max<int64_t>(rules_.top_logprobs, 2);
  const std::tuple<at::Tensor, at::Tensor> top = log_probs.topk(k);
  const at::Tensor values = std::get<0>(top).contiguous();   // float32 [k], descending
  const at::Tensor ids = std::get<1>(top).contiguous();      // int64 [k]
  const float* v = values.data_ptr<float>();
  const int64_t* id = ids.data_ptr<int64_t>();
  out.runner_up_logprob = id[0] == out.token ? v[1] : v[0];
  for (int64_t i = 0; i < rules_.top_logprobs; ++i) out.top.push_back({static_cast<int32_t>(id[i]), v[i]});
}

void ReplyDecoder::stop(FinishReason reason) {
  if (!finish_) finish_ = reason;
}

}  // namespace lorakv::runtime

// runtime/generator.h: decoding over LlamaModel for a batch of requests: greedy or seeded
// sampling, stop tokens and stop strings, optional log-probabilities, and streaming of
// printable text through a callback as soon as it is safe to show.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/llama_model.h"
#include "lorakv/runtime/reply_decoder.h"
#include "lorakv/runtime/sampler.h"

namespace lorakv::formats {
class BpeTokenizer;
}

namespace lorakv::runtime {

// One request: a raw prompt (no chat layout added) and what its reply may be (the rules:
// max_tokens, sampling, stops, prefixes, log-probabilities; runtime/reply_decoder.h).
struct GenerationRequest : ReplyRules {
  std::vector<int32_t> prompt;  // token ids, not empty
  // The LoRA adapter to run with (null: the base model). Holding the shared_ptr pins it
  // in its AdapterRegistry (unload refuses) for as long as the request lives.
  std::shared_ptr<const adapters::Adapter> adapter;
};

// One streamed step of one request.
struct StreamEvent {
  size_t request = 0;
  DecodedToken token;  // its id, text piece (may be empty), log-probabilities, finish
  bool finished() const { return token.finish.has_value(); }
};
// Return false to stop that request (FinishReason::kCallback).
using StreamCallback = std::function<bool(const StreamEvent&)>;

struct GenerationOutput {
  std::vector<int32_t> tokens;   // generated ids (a final stop token included)
  std::vector<double> logprobs;  // one per token when requested (ReplyRules::logprobs)
  std::string text;              // everything streamed, stop strings and stop tokens excluded
  FinishReason finish_reason = FinishReason::kLength;
};

struct GeneratorOptions {
  // false: recompute every sequence from scratch each step (a reference mode for tests).
  bool use_cache = true;
  // When set (and use_cache), filled after every step with the engine's memory, measured
  // from its pools: after the run it holds the last step's bytes and the peak.
  EngineMemory* memory = nullptr;
  // When set (and use_cache), the driver's sums over the run: steps, tokens processed,
  // prefix-hit tokens (identical prompts are computed once), host time per phase.
  DriverStats* stats = nullptr;
  // The eviction keys of each request's context (docs/eviction.md; use_cache only). A reply
  // is private rows, which no policy evicts, so with a policy the reply is committed into
  // its context every `commit_every` tokens: its rows then count toward the budget, and the
  // cache holds about the budget plus commit_every rows per request however long the reply.
  cache::eviction::EvictionConfig eviction;
  int64_t commit_every = 16;
  std::optional<cache::StorageDtype> kv_dtype;  // EngineOptions::kv_dtype (use_cache only)
  bool rerotate = false;                        // EngineOptions::rerotate (use_cache only)
  bool per_head_token_sets = false;             // EngineOptions::per_head_token_sets (use_cache only)
};

// Runs all requests as one batch until each finishes. `tokenizer` may be null when no
// request has stop strings or prefixes and nobody needs text (tokens are still produced;
// then only stop_token_ids end a reply, not the model's end tokens). Throws ConfigError
// for empty prompts or invalid rules.
std::vector<GenerationOutput> generate(const LlamaModel& model, const formats::BpeTokenizer* tokenizer,
                                       const std::vector<GenerationRequest>& requests,
                                       const StreamCallback& on_event = nullptr, GeneratorOptions options = {});

}  // namespace lorakv::runtime

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
#include "lorakv/runtime/sampler.h"

namespace lorakv::formats {
class BpeTokenizer;
}

namespace lorakv::runtime {

struct GenerationRequest {
  std::vector<int32_t> prompt;             // token ids, not empty
  SamplingOptions sampling;                // default: greedy
  int64_t max_new_tokens = 128;
  std::vector<int32_t> stop_token_ids;     // ends the sequence; the token is not shown as text
  std::vector<std::string> stop_strings;   // ends the sequence; the string is not shown
  bool logprobs = false;                   // record each generated token's log-probability
  // The LoRA adapter to run with (null: the base model). Holding the shared_ptr pins it
  // in its AdapterRegistry (unload refuses) for as long as the request lives.
  std::shared_ptr<const adapters::Adapter> adapter;
};

enum class FinishReason { kLength, kStopToken, kStopString, kCallback };
const char* finish_reason_name(FinishReason reason);

// One streamed step of one request.
struct StreamEvent {
  size_t request = 0;
  int32_t token = 0;
  std::string text;      // newly printable text (may be empty: held back or a stop token)
  double logprob = 0;    // filled when the request asked for logprobs
  bool finished = false;
};
// Return false to stop that request (FinishReason::kCallback).
using StreamCallback = std::function<bool(const StreamEvent&)>;

struct GenerationOutput {
  std::vector<int32_t> tokens;   // generated ids (a final stop token included)
  std::vector<double> logprobs;  // one per token when requested
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
// request has stop strings and nobody needs text (tokens are still produced). Throws
// ConfigError for empty prompts or invalid sampling options.
std::vector<GenerationOutput> generate(const LlamaModel& model, const formats::BpeTokenizer* tokenizer,
                                       const std::vector<GenerationRequest>& requests,
                                       const StreamCallback& on_event = nullptr, GeneratorOptions options = {});

}  // namespace lorakv::runtime

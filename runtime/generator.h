// runtime/generator.h: greedy decoding over LlamaModel for a batch of prompts, streaming
// each new token through a callback as soon as it is chosen.
#pragma once

#include <functional>
#include <vector>

#include "runtime/llama_model.h"

namespace lorakv::runtime {

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  std::vector<int32_t> stop_token_ids;  // generation of a sequence ends after emitting one
  bool use_cache = true;  // false: recompute the whole sequence every step (a reference mode)
};

// Called once per generated token: (prompt index, token id). Return false to stop that
// sequence early.
using TokenCallback = std::function<bool(size_t, int32_t)>;

struct GenerateResult {
  std::vector<std::vector<int32_t>> tokens;  // generated ids per prompt (stop token included)
  int64_t prefill_tokens = 0;
  int64_t decode_steps = 0;
};

// Greedy (argmax) decoding. Prompts may differ in length; they are prefilled together and
// decoded as one batch until each hits a stop token or max_new_tokens.
GenerateResult generate_greedy(const LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                               const GenerateOptions& options, const TokenCallback& on_token = nullptr);

}  // namespace lorakv::runtime

// runtime/generator.cpp: the greedy decoding loop.
#include "runtime/generator.h"

#include <algorithm>

#include "common/errors.h"

namespace lorakv::runtime {

GenerateResult generate_greedy(const LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                               const GenerateOptions& options, const TokenCallback& on_token) {
  GenerateResult result;
  result.tokens.resize(prompts.size());
  for (const auto& p : prompts) {
    if (p.empty()) throw ConfigError("cannot generate from an empty prompt");
  }
  std::unique_ptr<KvCache> cache = model.make_cache();
  std::vector<bool> done(prompts.size(), false);

  // First step: the whole prompts. Later steps: each live sequence's last token (or, with
  // use_cache off, the whole sequence again into a fresh cache).
  std::vector<SequenceInput> batch;
  std::vector<size_t> owner;  // batch row -> prompt index
  for (size_t i = 0; i < prompts.size(); ++i) {
    batch.push_back({SeqId(static_cast<int64_t>(i)), prompts[i]});
    owner.push_back(i);
    result.prefill_tokens += static_cast<int64_t>(prompts[i].size());
  }
  for (int64_t step = 0; step < options.max_new_tokens && !batch.empty(); ++step) {
    at::Tensor logits = model.forward(batch, *cache);  // [batch, vocab]
    at::Tensor next = logits.argmax(-1);               // int64 [batch]
    const int64_t* next_ids = next.data_ptr<int64_t>();
    ++result.decode_steps;

    std::vector<SequenceInput> next_batch;
    std::vector<size_t> next_owner;
    if (!options.use_cache) cache = model.make_cache();
    for (size_t row = 0; row < batch.size(); ++row) {
      const size_t i = owner[row];
      const auto token = static_cast<int32_t>(next_ids[row]);
      result.tokens[i].push_back(token);
      bool keep_going = !on_token || on_token(i, token);
      const auto& stops = options.stop_token_ids;
      if (std::find(stops.begin(), stops.end(), token) != stops.end()) keep_going = false;
      if (!keep_going) {
        done[i] = true;
        cache->release(batch[row].seq);
        continue;
      }
      std::vector<int32_t> tokens = {token};
      if (!options.use_cache) {
        tokens = prompts[i];
        tokens.insert(tokens.end(), result.tokens[i].begin(), result.tokens[i].end());
      }
      next_batch.push_back({batch[row].seq, std::move(tokens)});
      next_owner.push_back(i);
    }
    batch = std::move(next_batch);
    owner = std::move(next_owner);
  }
  return result;
}

}  // namespace lorakv::runtime

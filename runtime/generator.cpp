// runtime/generator.cpp: the decoding loop. Each step runs one batched forward over the
// live sequences (their prompts first, then one token each), then samples per sequence.
#include "runtime/generator.h"

#include <algorithm>
#include <memory>

#include "common/errors.h"
#include "formats/bpe_tokenizer.h"
#include "runtime/stop_strings.h"

namespace lorakv::runtime {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStopToken: return "stop_token";
    case FinishReason::kStopString: return "stop_string";
    case FinishReason::kCallback: return "callback";
  }
  return "unknown";
}

namespace {

// Per-request decoding state.
struct Live {
  std::vector<int32_t> context;  // prompt + generated
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<formats::StreamingDecoder> decoder;
  std::unique_ptr<StopStringFilter> stops;
  bool done = false;
};

}  // namespace

std::vector<GenerationOutput> generate(const LlamaModel& model, const formats::BpeTokenizer* tokenizer,
                                       const std::vector<GenerationRequest>& requests, const StreamCallback& on_event,
                                       GeneratorOptions options) {
  std::vector<GenerationOutput> outputs(requests.size());
  std::vector<Live> live(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    if (r.prompt.empty()) throw ConfigError("cannot generate from an empty prompt", {"", "request " + std::to_string(i)});
    if (!r.stop_strings.empty() && tokenizer == nullptr) {
      throw ConfigError("stop strings need a tokenizer", {"", "request " + std::to_string(i)});
    }
    live[i].context = r.prompt;
    live[i].sampler = std::make_unique<Sampler>(r.sampling);
    if (tokenizer != nullptr) {
      live[i].decoder = std::make_unique<formats::StreamingDecoder>(*tokenizer, /*render_special=*/false);
      live[i].stops = std::make_unique<StopStringFilter>(r.stop_strings);
    }
    live[i].done = r.max_new_tokens <= 0;
  }

  std::unique_ptr<KvCache> cache = model.make_cache();
  bool first_step = true;
  while (true) {
    std::vector<SequenceInput> batch;
    std::vector<size_t> owner;
    if (!options.use_cache) cache = model.make_cache();
    for (size_t i = 0; i < live.size(); ++i) {
      if (live[i].done) continue;
      const SeqId seq(static_cast<int64_t>(i));
      if (first_step || !options.use_cache) {
        batch.push_back({seq, live[i].context, requests[i].adapter.get()});
      } else {
        batch.push_back({seq, {live[i].context.back()}, requests[i].adapter.get()});
      }
      owner.push_back(i);
    }
    if (batch.empty()) break;
    first_step = false;
    const at::Tensor logits = model.forward(batch, *cache);  // float32 [batch, vocab]

    for (size_t row = 0; row < batch.size(); ++row) {
      const size_t i = owner[row];
      const GenerationRequest& r = requests[i];
      Live& s = live[i];
      GenerationOutput& out = outputs[i];
      const SampledToken picked = s.sampler->sample(logits[static_cast<int64_t>(row)], s.context);
      s.context.push_back(picked.token);
      out.tokens.push_back(picked.token);
      if (r.logprobs) out.logprobs.push_back(picked.logprob);

      StreamEvent event{i, picked.token, "", picked.logprob, false};
      const bool is_stop_token =
          std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), picked.token) != r.stop_token_ids.end();
      if (is_stop_token) {
        s.done = true;
        out.finish_reason = FinishReason::kStopToken;
      } else if (s.decoder) {
        event.text = s.stops->push(s.decoder->feed(picked.token));
        if (s.stops->stopped()) {
          s.done = true;
          out.finish_reason = FinishReason::kStopString;
        }
      }
      if (!s.done && static_cast<int64_t>(out.tokens.size()) >= r.max_new_tokens) {
        s.done = true;
        out.finish_reason = FinishReason::kLength;
      }
      if (s.done && s.decoder && !s.stops->stopped()) {
        // Two statements: the flush must reach the filter before finish() empties it.
        event.text += s.stops->push(s.decoder->flush());
        event.text += s.stops->finish();
        if (s.stops->stopped()) out.finish_reason = FinishReason::kStopString;
      }
      event.finished = s.done;
      out.text += event.text;
      if (on_event && !on_event(event) && !s.done) {
        s.done = true;
        out.finish_reason = FinishReason::kCallback;
      }
      if (s.done) cache->release(SeqId(static_cast<int64_t>(i)));
    }
  }
  return outputs;
}

}  // namespace lorakv::runtime

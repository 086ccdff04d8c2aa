// runtime/generator.cpp: the decoding loop on the engine. Each step runs one batched engine
// step over the live requests (their prompts first, in chunks, then one token each), then
// samples per request.
#include "lorakv/runtime/generator.h"

#include <algorithm>
#include <memory>

#include "lorakv/common/errors.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/stop_strings.h"

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

  // Each request is a context of its own with one reader in `full` mode: its prompt is the
  // context, its reply private rows. All of them run as one batched step at a time.
  // use_cache = false recomputes everything each step through the contiguous reference path.
  std::unique_ptr<Engine> engine;
  std::vector<ContextId> contexts(requests.size());
  if (options.use_cache) {
    EngineOptions eo;
    eo.base_rows = 0;
    for (const GenerationRequest& r : requests) {
      eo.base_rows += static_cast<int64_t>(r.prompt.size()) + std::max<int64_t>(r.max_new_tokens, 0) + 2 * eo.block_size;
    }
    engine = std::make_unique<Engine>(model, eo);
    for (size_t i = 0; i < requests.size(); ++i) {
      if (live[i].done) continue;
      contexts[i] = engine->create_context({SharingMode::kFull, SharedWriter::kFirst}, {requests[i].adapter});
      engine->append(contexts[i], requests[i].prompt);
    }
  }
  bool first_step = true;
  while (true) {
    std::vector<size_t> owner;
    at::Tensor logits;  // float32 [owner.size(), vocab]
    if (options.use_cache) {
      std::vector<at::Tensor> rows;
      if (first_step) {
        // Prompts in chunks, every request in each step, until all are processed.
        for (size_t i = 0; i < live.size(); ++i) {
          if (!live[i].done) owner.push_back(i);
        }
        rows.resize(owner.size());
        while (true) {
          std::vector<StepWork> work;
          std::vector<size_t> slot;
          for (size_t k = 0; k < owner.size(); ++k) {
            if (engine->pending_tokens({contexts[owner[k]], 0}) == 0) continue;
            StepWork w;
            w.reader = {contexts[owner[k]], 0};
            work.push_back(w);
            slot.push_back(k);
          }
          if (work.empty()) break;
          const StepResult r = engine->step(work);
          LORAKV_ASSERT(r.ok, "the generator's cache was sized for every request (needs " << r.capacity.blocks_needed.at(0) << " blocks, " << r.capacity.blocks_free.at(0) << " free)");
          for (size_t j = 0; j < work.size(); ++j) rows[slot[j]] = r.outputs[j].logits;
        }
      } else {
        std::vector<StepWork> work;
        for (size_t i = 0; i < live.size(); ++i) {
          if (live[i].done) continue;
          StepWork w;
          w.reader = {contexts[i], 0};
          w.kind = StepWork::Kind::kPrivate;
          w.tokens = {live[i].context.back()};
          work.push_back(std::move(w));
          owner.push_back(i);
        }
        if (!work.empty()) {
          const StepResult r = engine->step(work);
          LORAKV_ASSERT(r.ok, "the generator's cache was sized for every request (needs " << r.capacity.blocks_needed.at(0) << " blocks, " << r.capacity.blocks_free.at(0) << " free)");
          for (const StepOutput& o : r.outputs) rows.push_back(o.logits);
        }
      }
      if (owner.empty()) break;
      logits = at::cat(rows, 0);
      if (options.memory) *options.memory = engine->memory();
    } else {
      std::vector<SequenceInput> batch;
      std::unique_ptr<KvCache> cache = model.make_cache();
      for (size_t i = 0; i < live.size(); ++i) {
        if (live[i].done) continue;
        batch.push_back({SeqId(static_cast<int64_t>(i)), live[i].context, requests[i].adapter.get()});
        owner.push_back(i);
      }
      if (batch.empty()) break;
      logits = model.forward(batch, *cache);
    }
    first_step = false;
    for (size_t row = 0; row < owner.size(); ++row) {  // row of `logits` per live request
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
      if (s.done && engine) engine->release_context(contexts[i]);
    }
  }
  return outputs;
}

}  // namespace lorakv::runtime

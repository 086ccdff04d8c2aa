// runtime/generator.cpp: decoding on the engine through its driver (runtime/driver.h): each
// request is a driver job whose callback samples the next token.
#include "lorakv/runtime/generator.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "lorakv/common/errors.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/stop_strings.h"

namespace lorakv::runtime {

namespace {

// Samples request i's next token from its logits, streams it and decides whether it ends.
// Returns the token to run next, or nullopt when the request is done.
std::optional<int32_t> take_token(const GenerationRequest& r, size_t i, ReplyDecoder& decoder, GenerationOutput& out,
                                  const at::Tensor& logits, const StreamCallback& on_event) {
  StreamEvent event{i, decoder.next(logits)};
  out.tokens.push_back(event.token.token);
  if (r.logprobs) out.logprobs.push_back(event.token.logprob);
  out.text += event.token.text;
  if (on_event && !on_event(event) && !decoder.done()) decoder.stop(FinishReason::kCallback);
  if (decoder.finish()) out.finish_reason = *decoder.finish();
  if (decoder.done()) return std::nullopt;
  return event.token.token;
}

// Bytes of the base pool that hold every request's prompt and reply (whole blocks, per
// request) plus one block of slack per request for a reply's private rows, and with
// commits (`commit_rows` > 0) the rows of one commit twice while they move.
int64_t pool_bytes_for(const LlamaModel& model, const EngineOptions& eo, const std::vector<GenerationRequest>& requests,
                       int64_t commit_rows) {
  const int64_t block_size = eo.block_size;
  int64_t rows = 0;
  for (const GenerationRequest& r : requests) {
    rows += static_cast<int64_t>(r.prompt.size()) + std::max<int64_t>(r.max_tokens, 0) + 2 * block_size + commit_rows;
  }
  return Engine::base_row_bytes(model, eo) * rows;
}

// Commits each reader's reply so far into its context once it holds `every` private tokens,
// so that a policy can evict its rows (it never evicts private rows). In `full` with nothing
// appended since the reply began, the rows are adopted, not computed again.
void commit_replies(Engine& engine, const std::map<size_t, ReaderRef>& readers, int64_t every) {
  for (const auto& [request, reader] : readers) {
    if (static_cast<int64_t>(engine.private_tokens(reader).size()) < every) continue;
    engine.commit_private(reader);
    if (engine.pending_tokens(reader) > 0) {  // not adopted: the rows went, the reply cannot go on
      throw CapacityError("the pools cannot take the reply's rows into its context",
                          {"", "request " + std::to_string(request), "", "", "raise EngineOptions::kv_pool_bytes"});
    }
  }
}

// Where a request's prompt stops being context: its end, or for an activated LoRA (aLoRA)
// the last occurrence of its invocation tokens, from which the prompt runs as the reader's
// private work with the adapter (runtime/engine.h). Refuses a prompt without them (PEFT
// would silently run the base model) and eviction's commits (a committed reply becomes base
// rows, and the rest of it would have no invocation).
int64_t activation_split(const GenerationRequest& r, size_t index, bool commits) {
  const auto n = static_cast<int64_t>(r.prompt.size());
  if (!r.adapter || !r.adapter->activated()) return n;
  const std::vector<int32_t>& inv = r.adapter->invocation_tokens();
  const std::string where = "request " + std::to_string(index) + " (adapter '" + r.adapter->name() + "')";
  if (commits) {
    throw ConfigError("an activated LoRA's reply cannot be committed as it goes, which eviction needs",
                      {"", where, "a standard LoRA adapter, or no eviction policy", "", ""});
  }
  const int64_t start = r.adapter->find_invocation(r.prompt);
  if (start >= 0) return start;
  throw ConfigError("the prompt does not hold the activated LoRA's invocation tokens",
                    {r.adapter->invocation_tokens_file(), where, std::to_string(inv.size()) + " invocation tokens",
                     "none in " + std::to_string(n) + " prompt tokens",
                     "end the prompt with the turn header the adapter was trained on"});
}

void check_eviction(const GeneratorOptions& o) {
  o.eviction.check("eviction");  // ConfigError naming the key
  if (o.eviction.enabled() && o.commit_every < 1) {
    throw ConfigError("commit_every must be at least 1 token", {"", "commit_every", ">= 1", std::to_string(o.commit_every)});
  }
}

}  // namespace

std::vector<GenerationOutput> generate(const LlamaModel& model, const formats::BpeTokenizer* tokenizer,
                                       const std::vector<GenerationRequest>& requests, const StreamCallback& on_event,
                                       GeneratorOptions options) {
  std::vector<GenerationOutput> outputs(requests.size());
  std::vector<std::unique_ptr<ReplyDecoder>> live(requests.size());
  std::vector<std::vector<int32_t>> context(requests.size());  // prompt + generated (use_cache = false)
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    if (r.prompt.empty()) throw ConfigError("cannot generate from an empty prompt", {"", "request " + std::to_string(i)});
    live[i] = std::make_unique<ReplyDecoder>(r, tokenizer, r.prompt);
    context[i] = r.prompt;
  }

  if (options.use_cache) {
    // Each request is a context of its own with one reader in `full` mode: its prompt is the
    // context, its reply private rows (committed as it goes with an eviction policy). The
    // driver runs them all as one batched step at a time: prompts in chunks, then one token
    // each. Identical prompts share their rows (the first request writes them, the others
    // adopt them a step later).
    check_eviction(options);
    const bool commits = options.eviction.enabled();
    EngineOptions eo;
    eo.kv_dtype = options.kv_dtype;
    eo.rerotate = options.rerotate;
    eo.per_head_token_sets = options.per_head_token_sets;
    eo.kv_pool_bytes = pool_bytes_for(model, eo, requests, commits ? options.commit_every : 0);
    Engine engine(model, eo);
    std::vector<DriverJob> jobs;
    std::map<size_t, ReaderRef> generating;  // request -> its reader, until its context goes
    for (size_t i = 0; i < requests.size(); ++i) {
      if (live[i]->done()) continue;
      const ContextId ctx =
          engine.create_context({SharingMode::kFull, SharedWriter::kFirst, options.eviction}, {requests[i].adapter});
      const int64_t split = activation_split(requests[i], i, commits);
      engine.append(ctx, std::vector<int32_t>(requests[i].prompt.begin(), requests[i].prompt.begin() + split));
      DriverJob job;
      job.reader = {ctx, 0};
      job.suffix.assign(requests[i].prompt.begin() + split, requests[i].prompt.end());
      job.next = [&, i](const at::Tensor& logits) {
        return take_token(requests[i], i, *live[i], outputs[i], logits, on_event);
      };
      job.on_done = [&engine, &generating, ctx, i] {
        generating.erase(i);
        engine.release_context(ctx);
      };
      generating[i] = job.reader;
      jobs.push_back(std::move(job));
    }
    // After every step: the replies committed (with a policy), then the memory measured.
    const StepHook hook = [&](Engine& e, const StepResult&) {
      if (commits) commit_replies(e, generating, options.commit_every);
      if (options.memory) *options.memory = e.memory();
    };
    Driver driver(engine, hook);
    driver.run(jobs);
    if (options.stats) *options.stats = driver.stats();
    return outputs;
  }

  // use_cache = false: recompute every live sequence from scratch each step through the
  // contiguous reference path.
  while (true) {
    std::vector<SequenceInput> batch;
    std::vector<size_t> owner;
    std::unique_ptr<KvCache> cache = model.make_cache();
    for (size_t i = 0; i < live.size(); ++i) {
      if (live[i]->done()) continue;
      batch.push_back({SeqId(static_cast<int64_t>(i)), context[i], requests[i].adapter.get()});
      owner.push_back(i);
    }
    if (batch.empty()) break;
    const at::Tensor logits = model.forward(batch, *cache);  // float32 [owner.size(), vocab]
    for (size_t row = 0; row < owner.size(); ++row) {
      const size_t i = owner[row];
      const std::optional<int32_t> next =
          take_token(requests[i], i, *live[i], outputs[i], logits[static_cast<int64_t>(row)], on_event);
      if (next) context[i].push_back(*next);
    }
  }
  return outputs;
}

}  // namespace lorakv::runtime

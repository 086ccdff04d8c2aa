// cli/generate_command.cpp: `lorakv generate`: text generation from a prompt.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "lorakv/cli/cli.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/cli/eviction_flags.h"
#include "lorakv/cli/generate_options.h"
#include "lorakv/cli/json_line.h"
#include "lorakv/cli/printable_text.h"
#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"
#include "lorakv/formats/chat_template.h"
#include "lorakv/runtime/generator.h"
#include "lorakv/runtime/loaded_model.h"

namespace lorakv::cli {
namespace {

const char* kGenerateHelp = R"(usage: lorakv generate --model FILE --prompt TEXT [--adapter NAME=PATH --use NAME] [flags]

Generates text from a prompt, streaming it to stdout as it is produced. Greedy by default;
--temperature > 0 samples (reproducibly for a given --seed). Statistics go to stderr: the
prompt's rate (prefill: until the first generated token) and the generation's (decode: the
tokens after each prompt's first), apart.

flags:
  --model FILE              GGUF model file (required), e.g. models/SmolLM2-135M-Instruct.Q4_1.gguf
  --prompt TEXT             the prompt (this or --prompt-file required); special tokens such as
                            <|im_start|> are recognised; - reads it from standard input.
                            Repeatable: several prompts are generated as one batch, each printed
                            when the batch finishes (one prompt streams as it is produced)
  --prompt-file FILE        a prompt read from FILE, after the --prompt ones; repeatable
  --adapter NAME=PATH       load a LoRA adapter as NAME: a PEFT directory (adapter_config.json +
                            adapter_model.safetensors) or a llama.cpp GGUF LoRA file; repeatable
  --use NAME                the adapter for the prompts: once for every prompt, or once per prompt
                            in order; "base" runs a prompt without an adapter (default: the adapter
                            when one is loaded, base when none; with several, --use is required)
  --chat                    wrap the prompt in the model's chat format (ChatML for SmolLM2, from the
                            file's tokenizer.chat_template) as a user turn; stop at end of turn
  --chat-format NAME        with --chat: use this format (chatml or llama3) instead of detecting it
                            from the model's template (for models whose template is not recognised)
  --max-tokens N            the most tokens to generate (default 128, 1..100000)
  --temperature T           0 is greedy (default); > 0 samples from softmax(logits / T)
  --top-k K                 sample among the K most likely tokens (default 0: all)
  --top-p P                 sample among the smallest set of tokens with probability >= P (default 1)
  --repetition-penalty R    > 1 discourages repeating context tokens (default 1: off)
  --seed S                  random seed for sampling (default 0)
  --stop TEXT               stop when TEXT appears; not printed; repeatable; \n, \t, \r and \\
                            stand for a newline, a tab, a carriage return and a backslash
  --logprobs                after the text, print each generated token: "logprob", its text
                            (escaped: \n, \t, \\, and \xNN for a byte that is not a whole
                            UTF-8 character), its id and its log-probability, tab-separated
  --json                    one JSON object per line on stdout instead: text events as they
                            stream, a result per prompt (text, tokens, finish, logprobs),
                            then stats; a failure is an error event (message, exit_code)
  --memory                  print the KV cache's bytes (measured from its pools: base K, V,
                            positions, peak, metadata) and the model's and adapters' to stderr
  --dtype TYPE              float32 (default) or bfloat16 activations and compute
  --kv-dtype TYPE           float32, bfloat16 or int8 (a float32 scale per token and KV head)
                            for the K/V cache; default: the --dtype
  --rerotate                keys stored before RoPE, rotated to their index among the rows
                            kept (endless streaming; with --policy streaming_llm or none)
  --per-head                each KV head keeps its own token set (per-head eviction), as
                            --policy adakv needs
  --threads N               libtorch's threads (default 0: libtorch's default)
  --weights FORM            native (default: a GGUF file's 4/8-bit blocks stay quantised and
                            are read directly, about 6x fewer bytes per token than float32),
                            bfloat16, or float32 (exact against the dequantised model)
  --log-level LEVEL         trace, debug, info, warn, error or off (default info)
  --help                    this text

KV eviction (prompt and reply together; the reply joins the context every 16 tokens, so
its rows count toward the budget and a long reply stays within it):
)";

// The adapters named by --adapter, loaded for the model's shape and dtype.
void load_adapters(const std::vector<AdapterSpec>& specs, adapters::AdapterRegistry& registry) {
  for (const AdapterSpec& spec : specs) {
    auto adapter = registry.load(spec.name, spec.path);
    log::info("adapter '" + adapter->name() + "' loaded: " + adapters::adapter_format_name(adapter->format()) +
              ", rank " + std::to_string(adapter->min_rank()) + ".." + std::to_string(adapter->max_rank()) + ", " +
              std::to_string(adapter->modules().size()) + " modules, " + std::to_string(adapter->num_bytes()) +
              " bytes, hash " + adapter->content_hash());
  }
}

// A prompt the model's context cannot hold is refused before any step runs (as `run` refuses
// its input), unless rerotate streams past the context (--rerotate with streaming_llm).
void check_prompt_fits(size_t prompt_tokens, int64_t context, const GenerateOptions& o) {
  const bool streams = o.rerotate && o.eviction.policy == "streaming_llm";
  if (streams || static_cast<int64_t>(prompt_tokens) < context) return;
  throw ConfigError("the prompt is longer than the model's context",
                    {"", "--prompt", "at most " + std::to_string(context - 1) + " tokens (one position left to generate)",
                     std::to_string(prompt_tokens) + " tokens",
                     "a shorter prompt, or --rerotate --policy streaming_llm --budget N to stream past the context"});
}

// Seconds and tokens of one generate call, split at the first generated token.
struct GenerationTiming {
  double seconds = 0, prefill_s = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  int64_t decode_tokens = 0;  // the tokens after each prompt's first
  double decode_s() const { return std::max(seconds - prefill_s, 0.0); }
};

double per_second(int64_t n, double s) { return static_cast<double>(n) / std::max(s, 1e-9); }

std::string stats_line(const GenerationTiming& t, runtime::FinishReason finish) {
  char line[240];
  std::snprintf(line, sizeof line,
                "[prompt %lld tokens in %.2f s (%.1f tokens/s), generated %lld tokens in %.2f s (decode %.1f tokens/s), "
                "finish: %s]",
                static_cast<long long>(t.prompt_tokens), t.prefill_s, per_second(t.prompt_tokens, t.prefill_s),
                static_cast<long long>(t.generated_tokens), t.decode_s(), per_second(t.decode_tokens, t.decode_s()),
                runtime::finish_reason_name(finish));
  return line;
}

std::string stats_event(const GenerationTiming& t, runtime::FinishReason finish) {
  return JsonLine()
      .add("event", "stats")
      .add("prompt_tokens", t.prompt_tokens)
      .add("prefill_s", t.prefill_s)
      .add("prefill_tokens_per_s", per_second(t.prompt_tokens, t.prefill_s))
      .add("generated_tokens", t.generated_tokens)
      .add("decode_s", t.decode_s())
      .add("decode_tokens_per_s", per_second(t.decode_tokens, t.decode_s()))
      .add("seconds", t.seconds)
      .add("finish", runtime::finish_reason_name(finish))
      .str();
}

// One prompt's result: its text, token ids, finish and (when asked) each token's piece
// (printable_text), bytes and log-probability.
std::string result_event(const runtime::GenerationOutput& r, size_t index, const std::string& use,
                         const formats::BpeTokenizer& tok, bool logprobs) {
  JsonLine line;
  line.add("event", "result").add("request", static_cast<int64_t>(index)).add("adapter", use).add("text", r.text);
  line.add("tokens", r.tokens).add("finish", runtime::finish_reason_name(r.finish_reason));
  if (logprobs) {
    std::vector<formats::JsonValue> items;
    for (size_t t = 0; t < r.tokens.size(); ++t) {
      const std::string& piece = tok.token_piece(r.tokens[t]);
      std::vector<int32_t> bytes(piece.begin(), piece.end());
      for (int32_t& b : bytes) b &= 0xFF;
      items.push_back(JsonLine()
                          .add("token", static_cast<int64_t>(r.tokens[t]))
                          .add("text", printable_text(piece))
                          .add("bytes", bytes)
                          .add("logprob", r.logprobs[t])
                          .value());
    }
    line.add("logprobs", formats::JsonValue::make_array(std::move(items)));
  }
  return line.str();
}

// Loads the model and adapters, generates, prints.
int generate(const GenerateOptions& options, std::ostream& out, std::ostream& err);

}  // namespace

int run_generate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CliArgs a(args, generate_value_flags(), generate_bool_flags(), "generate");
  if (a.has("--help")) {
    out << kGenerateHelp << eviction_flags_help();
    return 0;
  }
  // Every flag is checked before the model loads (seconds to minutes).
  const GenerateOptions options = parse_generate_options(a);
  try {
    return generate(options, out, err);
  } catch (...) {
    // A --json reader sees the failure in the stream it reads; main prints it to stderr too.
    if (options.json) out << error_event_line(std::current_exception()) << std::flush;
    throw;
  }
}

namespace {

int generate(const GenerateOptions& options, std::ostream& out, std::ostream& err) {
  if (options.log_level) log::set_level(*options.log_level);
  if (options.threads > 0) at::set_num_threads(options.threads);
  const std::vector<std::string>& prompts = options.prompts;
  const std::vector<std::string>& uses = options.uses;
  runtime::GenerationRequest request = options.request;

  runtime::LoadedModel loaded = runtime::load_model(options.model_path, options.dtype, options.weights);
  if (!loaded.tokenizer) {
    throw ConfigError("the model has no tokenizer", {options.model_path, "tokenizer.json", "a tokenizer", "none",
                                                     "add the checkpoint's tokenizer.json"});
  }
  const formats::BpeTokenizer& tok = *loaded.tokenizer;
  adapters::AdapterRegistry registry(loaded.model->adapter_shape(), loaded.model->dtype());
  load_adapters(options.adapters, registry);
  std::optional<formats::ChatTemplate> chat;
  if (options.chat) {
    chat = options.chat_format ? formats::ChatTemplate::by_name(*options.chat_format)
                               : formats::ChatTemplate::from_jinja(tok.chat_template());
    // The model's end tokens end every reply (ReplyDecoder); a template's own end of turn too.
    if (auto end = tok.token_id(chat->end_of_turn())) request.stop_token_ids.push_back(*end);
  }
  std::vector<runtime::GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    runtime::GenerationRequest r = request;
    const std::string text = chat ? chat->render({{"user", prompts[i]}}, /*add_generation_prompt=*/true) : prompts[i];
    r.prompt = tok.encode(text);
    if (r.prompt.empty()) throw ConfigError("the prompt is empty", {"", "--prompt", "some text", "nothing", ""});
    check_prompt_fits(r.prompt.size(), loaded.model->config().context_length, options);
    if (!uses.empty() && uses[i] != kBaseAdapterName) r.adapter = registry.require(uses[i]);
    requests.push_back(std::move(r));
  }

  log::Stopwatch watch;
  std::optional<double> first_token_s;  // prefill ends at the first generated token
  const bool stream = requests.size() == 1 || options.json;
  runtime::EngineMemory memory;
  runtime::GeneratorOptions gen_options;
  gen_options.memory = &memory;
  gen_options.eviction = options.eviction;
  gen_options.kv_dtype = options.kv_dtype;
  gen_options.rerotate = options.rerotate;
  gen_options.per_head_token_sets = options.per_head_token_sets;
  std::vector<runtime::GenerationOutput> results = runtime::generate(
      *loaded.model, &tok, requests,
      [&](const runtime::StreamEvent& e) {
        if (!first_token_s) first_token_s = watch.seconds();
        const std::string& text = e.token.text;
        if (stream && options.json && !text.empty()) {
          out << JsonLine().add("event", "text").add("request", static_cast<int64_t>(e.request)).add("text", text).str()
              << "\n" << std::flush;
        } else if (stream && !options.json) {
          out << text << std::flush;
        }
        return true;
      },
      gen_options);
  GenerationTiming timing;
  timing.seconds = watch.seconds();
  timing.prefill_s = first_token_s.value_or(timing.seconds);
  for (const runtime::GenerationRequest& r : requests) timing.prompt_tokens += static_cast<int64_t>(r.prompt.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const runtime::GenerationOutput& result = results[i];
    const std::string use = uses.empty() ? kBaseAdapterName : uses[i];
    timing.generated_tokens += static_cast<int64_t>(result.tokens.size());
    timing.decode_tokens += std::max<int64_t>(0, static_cast<int64_t>(result.tokens.size()) - 1);
    if (options.json) {
      out << result_event(result, i, use, tok, request.logprobs) << "\n";
      continue;
    }
    if (!stream) out << "[" << i << " " << use << "] " << result.text;
    out << "\n";
    if (request.logprobs) {
      for (size_t t = 0; t < result.tokens.size(); ++t) {
        char line[64];
        std::snprintf(line, sizeof line, "\t%d\t%.5f\n", result.tokens[t], result.logprobs[t]);
        out << "logprob\t" << printable_text(tok.token_piece(result.tokens[t])) << line;
      }
    }
  }
  if (options.json) {
    out << stats_event(timing, results[0].finish_reason) << "\n";
  } else {
    err << stats_line(timing, results[0].finish_reason) << "\n";
  }
  char line[240];
  if (options.print_memory) {
    const cache::CacheStats& c = memory.cache;
    auto mib = [](int64_t b) { return static_cast<double>(b) / (1 << 20); };
    std::snprintf(line, sizeof line,
                  "[memory: KV cache peak %.2f MiB (at the last step: base K %.2f, base V %.2f, positions %.2f, "
                  "residuals %.2f MiB; host metadata %.2f MiB), model weights %.1f MiB, adapters %.2f MiB]",
                  mib(c.peak_bytes_in_use), mib(c.base_k_bytes), mib(c.base_v_bytes), mib(c.positions_bytes),
                  mib(c.residual_bytes_total), mib(c.metadata_bytes), mib(memory.model_weight_bytes), mib(memory.adapter_bytes));
    err << line << "\n";
    err << "[eviction: " << describe_eviction(options.eviction) << "; KV cache peak " << c.peak_bytes_in_use
        << " bytes]\n";
  }
  return 0;
}

}  // namespace
}  // namespace lorakv::cli

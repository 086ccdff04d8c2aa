// cli/generate_command.cpp: `lorakv generate`: text generation from a prompt.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/cli/eviction_flags.h"
#include "lorakv/cli/generate_options.h"
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
--temperature > 0 samples (reproducibly for a given --seed). Statistics go to stderr.

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
  --logprobs                after the text, print each generated token with its log-probability
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

}  // namespace

int run_generate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CliArgs a(args, generate_value_flags(), generate_bool_flags(), "generate");
  if (a.has("--help")) {
    out << kGenerateHelp << eviction_flags_help();
    return 0;
  }
  // Every flag is checked before the model loads (seconds to minutes).
  const GenerateOptions options = parse_generate_options(a);
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
  if (tok.eos_id() >= 0) request.stop_token_ids.push_back(tok.eos_id());
  std::optional<formats::ChatTemplate> chat;
  if (options.chat) {
    chat = options.chat_format ? formats::ChatTemplate::by_name(*options.chat_format)
                               : formats::ChatTemplate::from_jinja(tok.chat_template());
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
  const bool stream = requests.size() == 1;
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
        if (stream) out << e.text << std::flush;
        return true;
      },
      gen_options);
  const double seconds = watch.seconds();
  size_t generated = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const runtime::GenerationOutput& result = results[i];
    if (!stream) out << "[" << i << " " << (uses.empty() ? "base" : uses[i]) << "] " << result.text;
    out << "\n";
    if (request.logprobs) {
      for (size_t t = 0; t < result.tokens.size(); ++t) {
        char line[64];
        std::snprintf(line, sizeof line, "\t%d\t%.5f\n", result.tokens[t], result.logprobs[t]);
        out << "logprob\t" << tok.token_text(result.tokens[t]) << line;
      }
    }
    generated += result.tokens.size();
  }
  size_t prompt_tokens = 0;
  for (const runtime::GenerationRequest& r : requests) prompt_tokens += r.prompt.size();
  char line[240];
  std::snprintf(line, sizeof line, "[prompt %zu tokens, generated %zu tokens in %.2f s, %.1f tokens/s, finish: %s]",
                prompt_tokens, generated, seconds, static_cast<double>(generated) / std::max(seconds, 1e-9),
                runtime::finish_reason_name(results[0].finish_reason));
  err << line << "\n";
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

}  // namespace lorakv::cli

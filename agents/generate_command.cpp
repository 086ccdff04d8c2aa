// agents/generate_command.cpp: `lorakv generate`: text generation from a prompt.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "agents/cli_args.h"
#include "agents/commands.h"
#include "adapters/adapter_registry.h"
#include "common/errors.h"
#include "common/logging.h"
#include "formats/chat_template.h"
#include "runtime/generator.h"
#include "runtime/loaded_model.h"

namespace lorakv::agents {
namespace {

const char* kGenerateHelp = R"(usage: lorakv generate --model FILE --prompt TEXT [--adapter NAME=PATH --use NAME] [flags]

Generates text from a prompt, streaming it to stdout as it is produced. Greedy by default;
--temperature > 0 samples (reproducibly for a given --seed). Statistics go to stderr.

flags:
  --model FILE              GGUF model file (required), e.g. models/SmolLM2-135M-Instruct.Q4_1.gguf
  --prompt TEXT             the prompt (required); special tokens such as <|im_start|> are recognised.
                            Repeatable: several prompts are generated as one batch, each printed
                            when the batch finishes (one prompt streams as it is produced)
  --adapter NAME=PATH       load a LoRA adapter as NAME: a PEFT directory (adapter_config.json +
                            adapter_model.safetensors) or a llama.cpp GGUF LoRA file; repeatable
  --use NAME                the adapter for the prompts: once for every prompt, or once per prompt
                            in order; "base" runs a prompt without an adapter (default: base)
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
  --stop TEXT               stop when TEXT appears; not printed; repeatable
  --logprobs                after the text, print each generated token with its log-probability
  --dtype TYPE              float32 (default) or bfloat16 weights and compute
  --log-level LEVEL         trace, debug, info, warn, error or off (default info)
  --help                    this text
)";

runtime::SamplingOptions parse_sampling(const CliArgs& a) {
  runtime::SamplingOptions s;
  s.temperature = a.get_double("--temperature", 0.0, 0.0, 100.0);
  s.top_k = a.get_int("--top-k", 0, 0, 1 << 30);
  s.top_p = a.get_double("--top-p", 1.0, 1e-6, 1.0);
  s.repetition_penalty = a.get_double("--repetition-penalty", 1.0, 1e-3, 100.0);
  s.seed = static_cast<uint64_t>(a.get_int("--seed", 0, 0, INT64_MAX));
  return s;
}

}  // namespace

int run_generate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CliArgs a(args,
            {"--model", "--prompt", "--max-tokens", "--temperature", "--top-k", "--top-p", "--repetition-penalty",
             "--seed", "--stop", "--dtype", "--log-level", "--adapter", "--use", "--chat-format"},
            {"--chat", "--logprobs", "--help"}, "generate");
  if (a.has("--help")) {
    out << kGenerateHelp;
    return 0;
  }
  if (!a.positional().empty()) {
    throw ConfigError("unexpected argument", {"", a.positional().front(), "flags only", "", "see 'lorakv generate --help'"});
  }
  if (auto level = a.get("--log-level")) log::set_level(log::parse_level(*level));
  const std::string model_path = a.require("--model");
  const std::vector<std::string> prompts = a.get_all("--prompt");
  if (prompts.empty()) a.require("--prompt");  // throws naming the flag
  std::vector<std::string> uses = a.get_all("--use");
  if (uses.size() > 1 && uses.size() != prompts.size()) {
    throw ConfigError("--use must be given once or once per --prompt", {"", "--use",
                      std::to_string(prompts.size()) + " values", std::to_string(uses.size()), ""});
  }
  if (uses.size() == 1) uses.assign(prompts.size(), uses[0]);
  runtime::GenerationRequest request;
  request.max_new_tokens = a.get_int("--max-tokens", 128, 1, 100000);
  request.sampling = parse_sampling(a);
  request.stop_strings = a.get_all("--stop");
  request.logprobs = a.has("--logprobs");
  const at::ScalarType dtype = runtime::parse_model_dtype(a.get("--dtype").value_or("float32"));

  runtime::LoadedModel loaded = runtime::load_model(model_path, dtype);
  if (!loaded.tokenizer) {
    throw ConfigError("the model has no tokenizer", {model_path, "tokenizer.json", "a tokenizer", "none",
                                                     "add the checkpoint's tokenizer.json"});
  }
  const formats::BpeTokenizer& tok = *loaded.tokenizer;
  adapters::AdapterRegistry registry(loaded.model->adapter_shape(), loaded.model->dtype());
  for (const std::string& spec : a.get_all("--adapter")) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      throw ConfigError("bad --adapter value", {"", "--adapter", "NAME=PATH", spec, ""});
    }
    auto adapter = registry.load(spec.substr(0, eq), spec.substr(eq + 1));
    log::info("adapter '" + adapter->name() + "' loaded: " + adapters::adapter_format_name(adapter->format()) +
              ", rank " + std::to_string(adapter->min_rank()) + ".." + std::to_string(adapter->max_rank()) + ", " +
              std::to_string(adapter->modules().size()) + " modules, " + std::to_string(adapter->num_bytes()) +
              " bytes, hash " + adapter->content_hash());
  }
  if (tok.eos_id() >= 0) request.stop_token_ids.push_back(tok.eos_id());
  std::optional<formats::ChatTemplate> chat;
  if (a.has("--chat-format") && !a.has("--chat")) {
    throw ConfigError("--chat-format needs --chat", {"", "--chat-format", "--chat as well", "", ""});
  }
  if (a.has("--chat")) {
    auto format = a.get("--chat-format");
    chat = format ? formats::ChatTemplate::by_name(*format) : formats::ChatTemplate::from_jinja(tok.chat_template());
    if (auto end = tok.token_id(chat->end_of_turn())) request.stop_token_ids.push_back(*end);
  }
  std::vector<runtime::GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    runtime::GenerationRequest r = request;
    const std::string text = chat ? chat->render({{"user", prompts[i]}}, /*add_generation_prompt=*/true) : prompts[i];
    r.prompt = tok.encode(text);
    if (r.prompt.empty()) throw ConfigError("the prompt is empty", {"", "--prompt", "some text", "nothing", ""});
    if (!uses.empty() && uses[i] != "base") r.adapter = registry.require(uses[i]);
    requests.push_back(std::move(r));
  }

  log::Stopwatch watch;
  const bool stream = requests.size() == 1;
  std::vector<runtime::GenerationOutput> results =
      runtime::generate(*loaded.model, &tok, requests, [&](const runtime::StreamEvent& e) {
        if (stream) out << e.text << std::flush;
        return true;
      });
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
  return 0;
}

}  // namespace lorakv::agents

// agents/cli.cpp: `lorakv` commands. Today: generate.
#include "agents/cli.h"

#include <algorithm>
#include <cstdio>

#include "agents/cli_args.h"
#include "common/errors.h"
#include "common/logging.h"
#include "formats/chat_template.h"
#include "runtime/generator.h"
#include "runtime/loaded_model.h"

namespace lorakv::agents {
namespace {

const char* kMainHelp = R"(lorakv: one base model, many LoRA adapters, one shared KV cache.

usage: lorakv <command> [flags]

commands:
  generate   greedy text generation from a prompt, streamed to stdout

Run 'lorakv <command> --help' for the command's flags.
)";

const char* kGenerateHelp = R"(usage: lorakv generate --model FILE --prompt TEXT [flags]

Greedy decoding on the model, streaming the generated text to stdout as it is produced.
Statistics (tokens, speed) go to stderr.

flags:
  --model FILE        GGUF model file (required), e.g. models/SmolLM2-135M-Instruct.Q4_1.gguf
  --prompt TEXT       the prompt (required); special tokens such as <|im_start|> are recognised
  --chat              wrap the prompt in the model's chat format (ChatML for SmolLM2, from the
                      file's tokenizer.chat_template) as a user turn, and stop at end of turn
  --max-tokens N      the most tokens to generate (default 128, 1..100000)
  --log-level LEVEL   trace, debug, info, warn, error or off (default info)
  --help              this text
)";

int run_generate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CliArgs a(args, {"--model", "--prompt", "--max-tokens", "--log-level"}, {"--chat", "--help"}, "generate");
  if (a.has("--help")) {
    out << kGenerateHelp;
    return 0;
  }
  if (!a.positional().empty()) {
    throw ConfigError("unexpected argument", {"", a.positional().front(), "flags only", "", "see 'lorakv generate --help'"});
  }
  if (auto level = a.get("--log-level")) log::set_level(log::parse_level(*level));
  const std::string model_path = a.require("--model");
  std::string prompt = a.require("--prompt");
  const int64_t max_tokens = a.get_int("--max-tokens", 128, 1, 100000);

  runtime::LoadedModel loaded = runtime::load_model(model_path);
  const formats::BpeTokenizer& tok = *loaded.tokenizer;
  runtime::GenerateOptions options;
  options.max_new_tokens = max_tokens;
  if (tok.eos_id() >= 0) options.stop_token_ids.push_back(tok.eos_id());
  if (a.has("--chat")) {
    formats::ChatTemplate chat = formats::ChatTemplate::from_jinja(tok.chat_template());
    prompt = chat.render({{"user", prompt}}, /*add_generation_prompt=*/true);
    if (auto end = tok.token_id(chat.end_of_turn())) options.stop_token_ids.push_back(*end);
  }
  const std::vector<int32_t> ids = tok.encode(prompt);
  if (ids.empty()) throw ConfigError("the prompt is empty", {"", "--prompt", "some text", "nothing", ""});

  formats::StreamingDecoder decoder(tok, /*render_special=*/false);
  const auto& stops = options.stop_token_ids;
  log::Stopwatch watch;
  runtime::GenerateResult result = runtime::generate_greedy(
      *loaded.model, {ids}, options, [&](size_t, int32_t token) {
        if (std::find(stops.begin(), stops.end(), token) == stops.end()) {
          out << decoder.feed(token) << std::flush;
        }
        return true;
      });
  out << decoder.flush() << "\n";
  const double seconds = watch.seconds();
  const size_t generated = result.tokens[0].size();
  char line[200];
  std::snprintf(line, sizeof line, "[prompt %zu tokens, generated %zu tokens in %.2f s, %.1f tokens/s]", ids.size(),
                generated, seconds, static_cast<double>(generated) / std::max(seconds, 1e-9));
  err << line << "\n";
  return 0;
}

}  // namespace

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    out << kMainHelp;
    return args.empty() ? 1 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "generate") return run_generate(rest, out, err);
  throw ConfigError("unknown command", {"", args[0], "one of: generate", "", "run 'lorakv --help'"});
}

}  // namespace lorakv::agents

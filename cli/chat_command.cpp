// cli/chat_command.cpp: `lorakv chat`: one agent (the base model, or one adapter) in a
// conversation read line by line. It is a one-agent round-robin session config written from
// the flags and run as `lorakv run --interactive` runs one (cli/session_run.h), so the
// checks, the summary and the transcript are run's.
#include <filesystem>
#include <iostream>

#include "lorakv/agents/config/load_session_config.h"
#include "lorakv/agents/config_model_check.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/cli/generate_options.h"
#include "lorakv/cli/session_run.h"
#include "lorakv/common/logging.h"
#include "lorakv/formats/json.h"
#include "lorakv/runtime/engine.h"

namespace lorakv::cli {

namespace {

const char* kHelp = R"(usage: lorakv chat --model FILE [--adapter NAME=PATH] [--system TEXT] [flags]

A conversation with one agent, the base model or the model with one LoRA adapter: each line
you type is a user turn, the reply is streamed, and the conversation (one trajectory)
grows. An empty line or EOF (Ctrl-D) ends it, with the summary of 'lorakv run'.

  /reset    a new conversation (the system turn again, the old rows freed)
  /stats    the summary so far
  /help     these commands
Ctrl-C ends the reply in flight; Ctrl-C at the prompt, or a second one, ends the session
(the summary printed, the transcript written, exit code 130).

flags:
  --model FILE          GGUF file or Hugging Face checkpoint folder (required)
  --adapter NAME=PATH   a PEFT adapter folder or GGUF LoRA file the agent runs with; its
                        NAME is the agent's turn name (default: the base model, as
                        'assistant')
  --system TEXT         the system turn, written once at the start of each conversation
  --max-tokens N        most tokens per reply (default 256)
  --temperature T       0 is greedy (default 0)
  --top-k K, --top-p P, --repetition-penalty R, --seed S   sampling, as in 'lorakv generate'
  --kv-dtype DTYPE      float32, bfloat16 or int8 (default: the activations' dtype)
  --threads N           libtorch's threads (0: its default)
  --transcript FILE     write the conversation as JSON lines when it ends
  --log-level LEVEL     trace, debug, info, warn, error or off (default info, on stderr)
)";

// A YAML (and JSON) double-quoted scalar holding `text` exactly.
std::string yaml_quoted(const std::string& text) { return formats::JsonValue::make_string(text).to_string(); }

// The session config the flags describe, as YAML text for the one config loader (which
// fills in every default and checks every value).
std::string chat_config_yaml(const CliArgs& a) {
  const std::string model = parse_model_flag(a);
  const std::vector<AdapterSpec> adapters = parse_adapter_flags(a);
  if (adapters.size() > 1) {
    throw UsageError("chat runs one agent", {"", "--adapter", "at most one --adapter", std::to_string(adapters.size()),
                                             "use 'lorakv run' with a config for several agents"});
  }
  const runtime::SamplingOptions sampling = parse_sampling_flags(a);
  const int64_t max_tokens = a.get_int("--max-tokens", 256, 1, 100000);
  const int64_t threads = a.get_int("--threads", 0, 0, 4096);
  if (auto kv = a.get("--kv-dtype")) for_flag("--kv-dtype", a.help_hint(), [&] { return runtime::parse_kv_dtype(*kv); });
  const std::string agent = adapters.empty() ? "assistant" : adapters.front().name;
  std::string y;
  y += "model: {path: " + yaml_quoted(std::filesystem::absolute(model).string()) + ", threads: " + std::to_string(threads) + "}\n";
  if (!adapters.empty()) {
    y += "adapters:\n  " + yaml_quoted(agent) + ": " + yaml_quoted(std::filesystem::absolute(adapters.front().path).string()) + "\n";
  }
  y += "cache:\n  mode: full\n";
  if (auto kv = a.get("--kv-dtype")) y += "  kv_dtype: " + yaml_quoted(*kv) + "\n";
  y += "agents:\n  " + yaml_quoted(agent) + ":\n";
  if (!adapters.empty()) y += "    adapter: " + yaml_quoted(agent) + "\n";
  y += "    max_tokens: " + std::to_string(max_tokens) + "\n";
  y += "    sampling: {temperature: " + std::to_string(sampling.temperature) + ", top_k: " + std::to_string(sampling.top_k) +
       ", top_p: " + std::to_string(sampling.top_p) + ", repetition_penalty: " +
       std::to_string(sampling.repetition_penalty) + ", seed: " + std::to_string(sampling.seed) + "}\n";
  y += "workflow:\n  type: round_robin\n  agents: [" + yaml_quoted(agent) + "]\n  rounds: 1\n";
  if (auto system = a.get("--system")) y += "  system: " + yaml_quoted(*system) + "\n";
  if (auto transcript = a.get("--transcript")) {
    y += "output: {transcript: " + yaml_quoted(std::filesystem::absolute(*transcript).string()) + "}\n";
  }
  return y;
}

}  // namespace

int run_chat(const std::vector<std::string>& args, std::istream& in, std::ostream& out) {
  const CliArgs a(args,
                  {"--model", "--adapter", "--system", "--max-tokens", "--temperature", "--top-k", "--top-p",
                   "--repetition-penalty", "--seed", "--kv-dtype", "--threads", "--transcript", "--log-level"},
                  {"--help"}, "chat");
  if (a.has("--help")) {
    out << kHelp;
    return 0;
  }
  if (!a.positional().empty()) throw UsageError("unexpected argument", {"", a.positional().front(), "flags only", "", a.help_hint()});
  if (auto level = a.get("--log-level")) log::set_level(for_flag("--log-level", a.help_hint(), [&] { return log::parse_level(*level); }));
  const std::string yaml = chat_config_yaml(a);
  const agents::config::SessionConfig c = agents::config::load_session_config_from_string(yaml, "lorakv chat's flags", "");
  agents::check_config_against_model(c);
  SessionRunOptions o;
  o.interactive = true;
  o.slash_commands = true;
  o.prompt = "you> ";
  o.print_answer = false;
  return run_session(c, o, in, out);
}

}  // namespace lorakv::cli

// agents/cli.cpp: `lorakv` command dispatch and the top-level help.
#include "agents/cli.h"

#include "agents/commands.h"
#include "common/errors.h"

namespace lorakv::agents {
namespace {

const char* kMainHelp = R"(lorakv: one base model, many LoRA adapters, one shared KV cache.

usage: lorakv <command> [flags]

commands:
  generate   text generation from a prompt, streamed to stdout
  inspect    what a GGUF file or Hugging Face checkpoint holds: sizes, tokenizer, tensors

Run 'lorakv <command> --help' for the command's flags.
)";

}  // namespace

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    out << kMainHelp;
    return args.empty() ? 1 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "generate") return run_generate(rest, out, err);
  if (args[0] == "inspect") return run_inspect(rest, out, err);
  throw ConfigError("unknown command", {"", args[0], "one of: generate, inspect", "", "run 'lorakv --help'"});
}

}  // namespace lorakv::agents

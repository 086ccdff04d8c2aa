// cli/cli.cpp: `lorakv` command dispatch, the top-level help, and the one place that
// turns errors into messages and exit codes.
#include "lorakv/cli/cli.h"

#include <c10/util/Exception.h>

#include <iostream>
#include <new>
#include <sstream>

#include "lorakv/cli/commands.h"
#include "lorakv/cli/json_line.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {
namespace {

const char* kMainHelp = R"(lorakv: one base model, many LoRA adapters, one shared KV cache.

usage: lorakv <command> [flags]

commands:
  run        a multi-agent session from a YAML file (configs/): agents, tools, a workflow;
             --check validates the file without loading the weights
  chat       a conversation with one agent (the base model or one adapter), line by line
  serve      an OpenAI-compatible HTTP server: chat and text completions where the request's
             model is an adapter, /v1/models, /health, /metrics (docs/serving.md)
  generate   text generation from a prompt, streamed to stdout
  perplexity a model's perplexity on a text file, with or without KV eviction (--policy, --budget),
             and the KV bytes it took
  inspect    what a GGUF file, a checkpoint or an adapter holds: sizes, KV bytes per token,
             chat format; rank and targets of an adapter; the adapters in a folder
  bench      benchmarks (minutes to hours; 'lorakv bench --help' lists them with their times):
             memory, sessions, requests, episodes, eviction,
             eviction-layout
  version    lorakv version, git commit, libtorch version, CPU and vector path (also --version)

Run 'lorakv <command> --help' for the command's flags.

exit codes:
  0    done
  1    error: a file, the config, the model or the memory it names cannot be used (the
       message says which, and what to fix)
  2    usage error: the command line itself is wrong (a flag, a value, a command)
  3    internal failure: a lorakv bug, a libtorch error, out of memory
  130  ended by Ctrl-C (run and chat still print the summary and write the transcript)
)";

const char* kBugHint = "this is likely a lorakv bug: please report it with the command line";

}  // namespace

const std::vector<CommandEntry>& commands() {
  static const std::vector<CommandEntry> table = {
      {"run", [](const Args& a, std::ostream& out, std::ostream&) { return run_run(a, std::cin, out); }},
      {"chat", [](const Args& a, std::ostream& out, std::ostream&) { return run_chat(a, std::cin, out); }},
      {"serve", run_serve},
      {"generate", run_generate},
      {"perplexity", run_perplexity},
      {"inspect", run_inspect},
      {"bench", run_bench},
      {"version", run_version},
  };
  return table;
}

const char* main_help() { return kMainHelp; }

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    out << kMainHelp;
    return args.empty() ? kExitUsage : 0;
  }
  const std::string name = args[0] == "--version" ? "version" : args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  return find_named(commands(), name, "command", "run 'lorakv --help'").run(rest, out, err);
}

int report_error(const std::exception_ptr& error, std::ostream& err) {
  try {
    std::rethrow_exception(error);
  } catch (const UsageError& e) {
    err << "lorakv: " << e.what() << "\n";
    return kExitUsage;
  } catch (const InternalError& e) {  // before Error: it is one
    err << "lorakv: " << e.what() << " (" << kBugHint << ")\n";
  } catch (const Error& e) {
    err << "lorakv: " << e.what() << "\n";
    return kExitError;
  } catch (const c10::Error& e) {
    // what() carries a C++ backtrace of dozens of lines; the message alone is what helps.
    err << "lorakv: unexpected libtorch error: " << e.what_without_backtrace() << " (" << kBugHint << ")\n";
  } catch (const std::bad_alloc&) {
    err << "lorakv: out of memory (hint: a smaller model, --dtype bfloat16, or fewer prompts)\n";
  } catch (const std::exception& e) {
    err << "lorakv: unexpected error: " << e.what() << " (" << kBugHint << ")\n";
  } catch (...) {
    err << "lorakv: unexpected error of unknown type (" << kBugHint << ")\n";
  }
  return kExitFailure;
}

std::string error_event_line(const std::exception_ptr& error) {
  std::ostringstream message;
  const int code = report_error(error, message);
  std::string text = message.str();
  if (text.rfind("lorakv: ", 0) == 0) text.erase(0, 8);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return JsonLine().add("event", "error").add("message", text).add("exit_code", static_cast<int64_t>(code)).str() + "\n";
}

int run_cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    return run_cli(args, out, err);
  } catch (...) {
    return report_error(std::current_exception(), err);
  }
}

}  // namespace lorakv::cli

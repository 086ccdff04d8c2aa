// cli/cli.cpp: `lorakv` command dispatch, the top-level help, and the one place that
// turns errors into messages and exit codes.
#include "lorakv/cli/cli.h"

#include <c10/util/Exception.h>

#include <iostream>
#include <new>

#include "lorakv/cli/commands.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {
namespace {

const char* kMainHelp = R"(lorakv: one base model, many LoRA adapters, one shared KV cache.

usage: lorakv <command> [flags]

commands:
  run        a multi-agent session from a YAML file (configs/): agents, tools, a workflow
  generate   text generation from a prompt, streamed to stdout
  perplexity a model's perplexity on a text file, with or without KV eviction (--policy, --budget),
             and the KV bytes it took
  bench      benchmarks: 'bench memory' (shared-cache memory, fidelity and speed of N agents),
             'bench sessions' (concurrent sessions through the sessions API's scheduler)
  inspect    what a GGUF file or Hugging Face checkpoint holds: sizes, tokenizer, tensors
  version    lorakv version, git commit, libtorch version, CPU and vector path (also --version)

Run 'lorakv <command> --help' for the command's flags.
)";

const char* kBugHint = "this is likely a lorakv bug: please report it with the command line";

}  // namespace

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    out << kMainHelp;
    return args.empty() ? 1 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "run") return run_run(rest, std::cin, out);
  if (args[0] == "generate") return run_generate(rest, out, err);
  if (args[0] == "perplexity") return run_perplexity(rest, out, err);
  if (args[0] == "inspect") return run_inspect(rest, out, err);
  if (args[0] == "bench") return run_bench(rest, out, err);
  if (args[0] == "version" || args[0] == "--version") return run_version(rest, out, err);
  throw ConfigError("unknown command",
                    {"", args[0], "one of: run, generate, perplexity, bench, inspect, version", "", "run 'lorakv --help'"});
}

int report_error(const std::exception_ptr& error, std::ostream& err) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    err << "lorakv: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const InternalError& e) {
    err << "lorakv: " << e.what() << " (" << kBugHint << ")\n";
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

int run_cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    return run_cli(args, out, err);
  } catch (...) {
    return report_error(std::current_exception(), err);
  }
}

}  // namespace lorakv::cli

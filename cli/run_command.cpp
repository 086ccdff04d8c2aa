// cli/run_command.cpp: `lorakv run CONFIG.yaml`: a YAML-configured multi-agent session
// (configs/README.md) run once on an input, or on each line read (--interactive), streamed
// as it is generated, with a summary and an optional transcript file.
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "lorakv/agents/config/load_session_config.h"
#include "lorakv/agents/config_model_check.h"
#include "lorakv/cli/cli.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/cli/session_run.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"

namespace lorakv::cli {

namespace {

const char* kHelp = R"(usage: lorakv run CONFIG.yaml [--input TEXT | --interactive] [--json]
       lorakv run --check CONFIG.yaml

Runs the multi-agent session a YAML file describes (configs/README.md: model, adapters,
cache, agents, tools, workflow, output): each agent's turn is streamed as it is generated,
prefixed with its name, with tool calls and results, then a summary: tokens per agent, time
to first token, decode speed; the KV dtype and the eviction (policy, budget, rows evicted);
KV bytes by component next to N full caches (N agents each holding the whole trajectory at
the same KV dtype, nothing evicted). For one agent and a prompt, see 'lorakv chat'.

flags:
  --input TEXT     the user's turn (default: the config's workflow.input)
  --interactive    read inputs line by line from stdin, each one a run of the workflow on
                   the same session (the trajectory grows; the system turn is written
                   once); an empty line or EOF ends
  --json           one JSON object per event: append, turn_start, text, turn_end,
                   tool_call, tool_result, result, then summary; a failure is an error
                   event (message, exit_code) before the exit. docs/workflows.md lists
                   every event's fields
  --threads N      libtorch's threads for this run, in place of the config's model.threads
                   (0: libtorch's default)
  --log-level L    trace, debug, info, warn, error or off (default info; the log goes to
                   stderr)
  --check          validate the config (the file, then the adapters and the pools against
                   the model's header) and print it with every default, without loading
                   the weights

Ctrl-C ends the reply in flight, and the workflow stops there; a second Ctrl-C, or one at
the --interactive prompt, ends the run. The summary is still printed and the transcript
written; the exit code is then 130 (others: 'lorakv --help').
)";

// The model-aware check's findings, as YAML comments after the effective configuration.
void print_report(const agents::ConfigModelReport& r, std::ostream& out) {
  out << "# model: " << r.architecture << " '" << r.model_name << "', " << r.num_layers << " layers, hidden " << r.hidden
      << ", context " << r.context_length << ", vocabulary " << r.vocab_size << "\n";
  for (const agents::ConfigModelReport::AdapterInfo& a : r.adapters) {
    std::string modules;
    for (const std::string& m : a.modules) modules += (modules.empty() ? "" : ", ") + m;
    out << "# adapter " << a.name << ": " << a.format << ", rank " << a.max_rank << ", " << modules << ", " << a.bytes
        << " bytes\n";
  }
}

int check(const std::string& path, std::ostream& out) {
  const agents::config::SessionConfig c = agents::config::load_session_config(path);
  const agents::ConfigModelReport report = agents::check_config_against_model(c);  // headers only, no weights
  out << agents::config::effective_config_yaml(c);
  print_report(report, out);
  return 0;
}

}  // namespace

int run_run(const std::vector<std::string>& args, std::istream& in, std::ostream& out) {
  const CliArgs a(args, {"--input", "--threads", "--log-level"}, {"--interactive", "--json", "--check", "--help"}, "run");
  if (a.has("--help")) {
    out << kHelp;
    return 0;
  }
  if (a.positional().size() != 1) {
    throw UsageError("lorakv run takes one config file", {"", "CONFIG", "a YAML file", "", a.help_hint()});
  }
  const std::string path = a.positional().front();
  const int64_t threads = a.get_int("--threads", 0, 0, 4096);  // checked before anything else
  if (auto level = a.get("--log-level")) log::set_level(for_flag("--log-level", a.help_hint(), [&] { return log::parse_level(*level); }));
  if (a.has("--check")) return check(path, out);
  if (a.has("--input") && a.has("--interactive")) {
    throw UsageError("--input and --interactive exclude each other", {"", "--interactive", "", "", a.help_hint()});
  }
  SessionRunOptions o;
  o.json = a.has("--json");
  o.interactive = a.has("--interactive");
  o.input = a.get("--input");
  try {
    // Every check before any weights load: the file, then the adapters against the model's header.
    agents::config::SessionConfig c = agents::config::load_session_config(path);
    if (a.has("--threads")) c.model.threads = static_cast<int>(threads);
    agents::check_config_against_model(c);
    return run_session(c, o, in, out);
  } catch (...) {
    // A --json reader sees the failure in the stream it reads; main prints it to stderr too.
    if (o.json) out << error_event_line(std::current_exception()) << std::flush;
    throw;
  }
}

}  // namespace lorakv::cli

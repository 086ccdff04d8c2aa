// cli/run_command.cpp: `lorakv run CONFIG.yaml`: a YAML-configured multi-agent session
// (configs/README.md) run once on an input, or on each line read (--interactive), streamed
// as it is generated, with a summary and an optional transcript file.
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "lorakv/agents/config/load_session_config.h"
#include "lorakv/agents/config_model_check.h"
#include "lorakv/agents/configured_session.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/cli/json_line.h"
#include "lorakv/cli/run_printer.h"
#include "lorakv/common/atomic_file.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {

namespace {

const char* kHelp = R"(usage: lorakv run CONFIG.yaml [--input TEXT | --interactive] [--json]
       lorakv run --check CONFIG.yaml

Runs the multi-agent session a YAML file describes (configs/README.md: model, adapters,
cache, agents, tools, workflow, output): each agent's turn is streamed as it is generated,
prefixed with its name, with tool calls and results, then a summary (tokens per agent, time
to first token, decode speed, KV bytes by component next to what N full caches would hold).

flags:
  --input TEXT     the user's turn (default: the config's workflow.input)
  --interactive    read inputs line by line from stdin, each one a run of the workflow on
                   the same session (the trajectory grows); an empty line or EOF ends
  --json           one JSON object per event (append, turn_start, text, turn_end,
                   tool_call, tool_result, result), then the summary
  --threads N      libtorch's threads for this run, in place of the config's model.threads
                   (0: libtorch's default)
  --check          validate the config (the file, then the adapters against the model's
                   header) and print it with every default, without loading the weights
)";

// The transcript (output.transcript): one JSON line per turn, in trajectory order. Every
// key but "stats" is the same for the same config, seed and input, so two runs diff clean
// with the stats left out.
std::string transcript_lines(const std::vector<agents::WorkflowTurn>& turns) {
  std::string out;
  for (size_t i = 0; i < turns.size(); ++i) {
    const agents::WorkflowTurn& t = turns[i];
    JsonLine line;
    line.add("turn", static_cast<int64_t>(i)).add("role", t.role).add("text", t.text);
    if (t.kind == agents::WorkflowTurn::Kind::kAgent) {
      line.add("tokens", t.reply.tokens).add("end", agents::reply_end_name(t.reply.end)).add("appended", t.reply.appended);
      line.add("stats", JsonLine()
                            .add("generated_tokens", static_cast<int64_t>(t.reply.tokens.size()))
                            .add("time_to_first_token_s", t.reply.time_to_first_token_s)
                            .add("decode_s", t.reply.decode_seconds));
    }
    if (t.kind == agents::WorkflowTurn::Kind::kTool) {
      line.add("tool", t.tool).add("status", agents::tool_status_name(t.tool_result.status));
      line.add("stats", JsonLine().add("seconds", t.tool_result.seconds));
    }
    out += line.str() + "\n";
  }
  return out;
}

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
  const CliArgs a(args, {"--input", "--threads"}, {"--interactive", "--json", "--check", "--help"}, "run");
  if (a.has("--help")) {
    out << kHelp;
    return 0;
  }
  if (a.positional().size() != 1) {
    throw ConfigError("lorakv run takes one config file", {"", "CONFIG", "a YAML file", "", a.help_hint()});
  }
  const std::string path = a.positional().front();
  const int64_t threads = a.get_int("--threads", 0, 0, 4096);  // checked before anything else
  if (a.has("--check")) return check(path, out);
  if (a.has("--input") && a.has("--interactive")) {
    throw ConfigError("--input and --interactive exclude each other", {"", "--interactive", "", "", a.help_hint()});
  }
  const bool json = a.has("--json");
  // Every check before any weights load: the file, then the adapters against the model's header.
  agents::config::SessionConfig c = agents::config::load_session_config(path);
  if (a.has("--threads")) c.model.threads = static_cast<int>(threads);
  agents::check_config_against_model(c);

  agents::Runtime rt(agents::runtime_options(c));
  std::shared_ptr<agents::Session> session = agents::open_configured_session(rt, c);
  const agents::ToolRegistry tools = agents::configured_tools(c);
  RunPrinter printer(out, json);
  std::optional<ProgressLine> progress;
  if (!json && &out == &std::cout && isatty(STDOUT_FILENO) != 0) progress.emplace(printer, *session);

  std::vector<agents::WorkflowTurn> turns;
  auto run_once = [&](const std::string& input) {
    const agents::ConfiguredRun run = agents::run_configured_workflow(*session, c, tools, input, printer.observer());
    printer.answer(run.result);
    turns.insert(turns.end(), run.result.turns.begin(), run.result.turns.end());
  };
  if (a.has("--interactive")) {
    const bool prompt = !json && &in == &std::cin && isatty(STDIN_FILENO) != 0;
    for (std::string line;;) {
      if (prompt) out << "> " << std::flush;
      if (!std::getline(in, line) || line.empty()) break;
      run_once(line);
    }
  } else {
    run_once(a.get("--input").value_or(""));
  }
  progress.reset();
  printer.summary(session->stats(), rt.stats(), c.agents.size(), c.cache.mode, c.cache.block_size);
  if (!c.output.transcript.empty()) {
    const std::string text = transcript_lines(turns);
    write_file_atomically(c.output.transcript, std::vector<uint8_t>(text.begin(), text.end()));
    if (!json) out << "wrote " << c.output.transcript << "\n";
  }
  return 0;
}

}  // namespace lorakv::cli

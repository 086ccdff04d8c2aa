// cli/session_run.h: a loaded YAML session run from the command line, shared by `lorakv run`
// and `lorakv chat`: the runtime and session, the workflow once on an input or once per line
// read, the streamed turns, Ctrl-C (cli/interrupts.h), the summary and the transcript.
#pragma once

#include <istream>
#include <optional>
#include <ostream>
#include <string>

#include "lorakv/agents/config/session_config.h"

namespace lorakv::cli {

struct SessionRunOptions {
  bool json = false;          // one JSON object per event, and an `error` event before a failure
  bool interactive = false;   // one workflow run per line read from `in`; an empty line or EOF ends
  bool slash_commands = false;  // interactive lines /reset, /stats and /help are commands
  std::optional<std::string> input;  // the one run's input; unset: the config's workflow.input
  std::string prompt = "> ";  // shown before each line when `in` and `out` are a terminal
  bool print_answer = true;   // the workflow's answer line after each run (a chat's reply is its answer)
};

// Runs `c` (checked already: load_session_config, check_config_against_model). Returns the
// exit code: 0, or kExitInterrupted when Ctrl-C ended it (after the summary and the
// transcript).
int run_session(const agents::config::SessionConfig& c, const SessionRunOptions& options, std::istream& in,
                std::ostream& out);

}  // namespace lorakv::cli

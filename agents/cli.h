// agents/cli.h: the `lorakv` command line: parses arguments and runs a command.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace lorakv::agents {

// Runs `lorakv <command> [flags]`. Program output goes to `out`, diagnostics to `err`.
// Returns the process exit code; throws lorakv::Error for bad input (main prints it).
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace lorakv::agents

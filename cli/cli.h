// cli/cli.h: the `lorakv` command line: parses arguments and runs a command.
#pragma once

#include <exception>
#include <ostream>
#include <string>
#include <vector>

namespace lorakv::cli {

// Runs `lorakv <command> [flags]`. Program output goes to `out`, diagnostics to `err`.
// Returns the process exit code; throws lorakv::Error for bad input (main prints it).
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Exit codes of the `lorakv` process besides a command's own.
inline constexpr int kExitBadInput = 2;  // a lorakv::Error: the message says what to fix
inline constexpr int kExitFailure = 3;   // anything else: a lorakv bug, a libtorch error, out of memory

// Writes the one-line message for `error` to `err` and returns the exit code: lorakv
// errors as they are; a libtorch c10::Error without its C++ backtrace, and other
// unexpected errors, with a hint that it is likely a lorakv bug.
int report_error(const std::exception_ptr& error, std::ostream& err);

// run_cli with every exception turned into a message and an exit code (main's body).
int run_cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace lorakv::cli

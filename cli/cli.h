// cli/cli.h: the `lorakv` command line: parses arguments and runs a command.
#pragma once

#include <exception>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace lorakv::cli {

// One `lorakv` command: its name and its function (cli/commands.h).
using Args = std::vector<std::string>;
struct CommandEntry {
  std::string name;
  std::function<int(const Args& args, std::ostream& out, std::ostream& err)> run;
};
// Every command, in the order the top-level help lists them.
const std::vector<CommandEntry>& commands();
// The top-level help (`lorakv --help`): every command, the exit codes.
const char* main_help();

// Runs `lorakv <command> [flags]`. Program output goes to `out`, diagnostics to `err`.
// Returns the process exit code; throws lorakv::Error for bad input (main prints it).
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Exit codes of the `lorakv` process (listed in the top-level help, kMainHelp).
inline constexpr int kExitError = 1;        // a lorakv::Error: a file, config, model or capacity; the message says what to fix
inline constexpr int kExitUsage = 2;        // a UsageError (cli_args.h): the command line itself is wrong
inline constexpr int kExitFailure = 3;      // anything else: a lorakv bug, a libtorch error, out of memory
inline constexpr int kExitInterrupted = 130;  // Ctrl-C ended the command (128 + SIGINT), after its summary

// Writes the one-line message for `error` to `err` and returns the exit code: lorakv
// errors as they are; a libtorch c10::Error without its C++ backtrace, and other
// unexpected errors, with a hint that it is likely a lorakv bug.
int report_error(const std::exception_ptr& error, std::ostream& err);

// The `error` event of a --json stream (run, generate) for `error`, one line with its
// newline: the message report_error writes (without "lorakv: ") and the exit code.
std::string error_event_line(const std::exception_ptr& error);

// run_cli with every exception turned into a message and an exit code (main's body).
int run_cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace lorakv::cli

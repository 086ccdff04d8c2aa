// cli/commands.h: one function per `lorakv` subcommand (each in its own file).
// Arguments exclude the command name; output to `out`, diagnostics to `err`; the return
// value is the exit code; bad input throws lorakv::Error.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace lorakv::cli {

int run_generate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int run_inspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int run_bench(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// `lorakv bench sessions` (cli/bench/bench_sessions.cpp); args after "sessions".
int run_sessions_bench(const std::vector<std::string>& args, std::ostream& out);
int run_version(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace lorakv::cli

// cli/commands.h: one function per `lorakv` subcommand (each in its own file).
// Arguments exclude the command name; output to `out`, diagnostics to `err`; the return
// value is the exit code; bad input throws lorakv::Error.
#pragma once

#include <istream>
#include <ostream>
#include <string>
#include <vector>

namespace lorakv::cli {

int run_generate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int run_inspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int run_bench(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// One `lorakv bench` benchmark: its name and its function (args after the name).
struct BenchEntry {
  std::string name;
  int (*run)(const std::vector<std::string>& args, std::ostream& out);
};
// Every benchmark, in the order `lorakv bench --help` lists them.
const std::vector<BenchEntry>& benchmarks();
// `lorakv bench --help`: every benchmark with its typical time.
const char* bench_help();
// `lorakv bench memory` (cli/bench/bench_command.cpp); args after "memory".
int run_memory_bench(const std::vector<std::string>& args, std::ostream& out);
// `lorakv bench sessions` (cli/bench/bench_sessions.cpp); args after "sessions".
int run_sessions_bench(const std::vector<std::string>& args, std::ostream& out);
// `lorakv bench requests` (cli/bench/bench_requests.cpp); args after "requests".
int run_requests_bench(const std::vector<std::string>& args, std::ostream& out);
// `lorakv bench episodes` (cli/bench/bench_episodes.cpp); args after "episodes".
int run_episodes_bench(const std::vector<std::string>& args, std::ostream& out);
// `lorakv bench eviction` (cli/bench/bench_eviction.cpp); args after "eviction".
int run_eviction_bench(const std::vector<std::string>& args, std::ostream& out);
// `lorakv bench eviction-layout` (cli/bench/bench_eviction_layout.cpp); args after "eviction-layout".
int run_eviction_layout_bench(const std::vector<std::string>& args, std::ostream& out);
// `lorakv run CONFIG.yaml` (cli/run_command.cpp); --interactive reads its inputs from `in`.
int run_run(const std::vector<std::string>& args, std::istream& in, std::ostream& out);
// `lorakv chat` (cli/chat_command.cpp): one agent, a conversation read line by line from `in`.
int run_chat(const std::vector<std::string>& args, std::istream& in, std::ostream& out);
// `lorakv perplexity` (cli/perplexity_command.cpp): a text's perplexity under a KV eviction policy.
int run_perplexity(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// `lorakv serve` (cli/serve_command.cpp): the OpenAI-compatible server, until SIGTERM.
int run_serve(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int run_version(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace lorakv::cli

// cli/bench/bench_eviction_agents.h: the agents part of `lorakv bench eviction`: what
// compressing a base shared by three role adapters costs them, and what scoring the rows
// across agents (sum, max) buys against scoring by the writer alone.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace lorakv::cli {

struct EvictionAgentsOptions {
  std::string model_path;
  std::string assets_dir;  // role_adapters/ and agentic_qa/
  std::string out_dir;
  int64_t context_tokens = 2000;  // episodes appended until about this many tokens
  std::vector<std::string> policies = {"streaming_llm", "h2o", "snapkv"};
  std::vector<double> budgets = {0.25};
  // Every agent reads each role turn in the role's step (replay_role_turns' every_agent_reads),
  // so sum and max over readers differ; writes eviction_agents_together.csv instead.
  bool every_agent_reads = false;
};

// Writes eviction_agents.csv (or eviction_agents_together.csv) under o.out_dir and prints its table to `out`.
void run_eviction_agents(const EvictionAgentsOptions& o, std::ostream& out);

}  // namespace lorakv::cli

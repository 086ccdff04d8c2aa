// cli/eviction_flags.h: the KV eviction flags a command takes (--policy, --budget, --sinks,
// --window; `lorakv perplexity`), parsed into the engine's EvictionConfig with every check
// made before a model loads; errors name the flag.
#pragma once

#include <set>
#include <string>

#include "lorakv/cache/eviction/eviction_config.h"
#include "lorakv/cli/cli_args.h"

namespace lorakv::cli {

// The value flags and the boolean flags of the eviction set, to merge into a command's own.
const std::set<std::string>& eviction_value_flags();
const std::set<std::string>& eviction_bool_flags();

// The flags' lines for a command's --help text.
const char* eviction_flags_help();

// --policy NAME (default none); --budget N (an integer >= 1: rows kept per lane) or F (with
// a '.': a fraction in (0, 1] of the context's tokens); --sinks N, --window N. A budget,
// sinks or window without a policy, and a policy without a budget, are refused. Throws
// UsageError naming the flag.
cache::eviction::EvictionConfig parse_eviction_flags(const CliArgs& args);

// "none", or "h2o, budget 64 tokens, sinks 4, window 16" (a fraction as "budget 0.25 of the context").
std::string describe_eviction(const cache::eviction::EvictionConfig& config);

}  // namespace lorakv::cli

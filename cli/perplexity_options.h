// cli/perplexity_options.h: `lorakv perplexity`'s flags, parsed and checked before the model
// loads (the text file is read then too), and the rule that cuts the text into windows.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lorakv/cache/cache_types.h"
#include "lorakv/cache/eviction/eviction_config.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/common/logging.h"
#include "lorakv/runtime/linear_weight.h"

namespace lorakv::cli {

struct PerplexityOptions {
  std::string model_path;                    // exists
  std::string text_path;                     // a regular file
  std::string text;                          // its content, not empty
  cache::eviction::EvictionConfig eviction;  // checked
  int64_t context = 1024;                    // tokens per window, >= 2; the model's limit is checked once it loads
  int64_t chunk = 256;                       // most tokens one engine step processes, >= 1
  int64_t threads = 0;                       // 0: libtorch's default
  bool json = false;
  bool per_head_token_sets = false;  // --per-head: one token set per KV head
  std::string dump_kept_path;        // --dump-kept: where the kept rows per lane go ("" = nowhere)
  at::ScalarType dtype = at::kFloat;
  std::optional<cache::StorageDtype> kv_dtype;  // --kv-dtype; unset: the activations' dtype
  bool rerotate = false;                        // --rerotate (EngineOptions::rerotate)
  runtime::WeightForm weights = runtime::WeightForm::kNative;
  std::optional<log::Level> log_level;
};

const std::set<std::string>& perplexity_value_flags();
const std::set<std::string>& perplexity_bool_flags();

// Parses and checks every flag (not --help) and reads --file. Throws ConfigError naming the
// flag: a missing or bad value, a path that is not a readable file, an empty text.
PerplexityOptions parse_perplexity_options(const CliArgs& args);

// The windows [begin, end) scored over `num_tokens` tokens: consecutive windows of `context`
// tokens; a shorter last window is scored only when it holds at least min(chunk, context)
// tokens, or when it is the whole text (then at least 2 tokens).
std::vector<std::pair<int64_t, int64_t>> plan_windows(int64_t num_tokens, int64_t context, int64_t chunk);

}  // namespace lorakv::cli

// cli/generate_options.h: `lorakv generate`'s flags, parsed and checked as a whole before
// anything is loaded: every value, range and cross-reference (--use names against the
// --adapter names, --chat-format against --chat, paths that must exist). A mistake costs
// the user a message naming the flag, not a model load first.
#pragma once

#include <ATen/ATen.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "lorakv/cli/cli_args.h"
#include "lorakv/common/logging.h"
#include "lorakv/runtime/generator.h"

namespace lorakv::cli {

// The name --use takes for "no adapter"; an adapter may not be called that.
inline constexpr const char* kBaseAdapterName = "base";

struct AdapterSpec {
  std::string name;
  std::string path;  // exists (a PEFT directory or a GGUF file; its content is checked at load)
};

struct GenerateOptions {
  std::string model_path;                      // exists
  std::vector<std::string> prompts;            // at least one, none empty
  std::vector<std::string> uses;               // one per prompt ("base" or an adapter name), or empty: all base
  std::vector<AdapterSpec> adapters;           // distinct names, in the order given
  runtime::GenerationRequest request;          // everything but the prompt and the stop token ids
  cache::eviction::EvictionConfig eviction;    // --policy, --budget, --sinks, --window (cli/eviction_flags.h)
  at::ScalarType dtype = at::kFloat;
  std::optional<cache::StorageDtype> kv_dtype;  // --kv-dtype; unset: the activations' dtype
  bool rerotate = false;                        // --rerotate
  bool per_head_token_sets = false;             // --per-head
  int threads = 0;                              // --threads; 0: libtorch's default
  runtime::WeightForm weights = runtime::WeightForm::kNative;  // --weights
  bool chat = false;
  bool print_memory = false;  // --memory
  bool json = false;          // --json: one JSON object per event on stdout
  std::optional<std::string> chat_format;      // a known format name; only with chat
  std::optional<log::Level> log_level;
};

// Parses and checks every flag of `lorakv generate` (not --help). Reads nothing but whether
// the named paths exist. Throws UsageError (the command line) or ConfigError (a path)
// naming the flag, the value and a hint.
// `--prompt -` reads the prompt from `standard_input`, `--prompt-file FILE` from the file.
GenerateOptions parse_generate_options(const CliArgs& args, std::istream& standard_input = std::cin);

// --model: required, and a path that exists (a checkpoint folder with its tokenizer.json).
std::string parse_model_flag(const CliArgs& args);
// Each --adapter NAME=PATH: distinct names, none "base", paths that exist (a PEFT folder
// with both its files). Throws UsageError or ConfigError naming --adapter.
std::vector<AdapterSpec> parse_adapter_flags(const CliArgs& args);
// --temperature, --top-k, --top-p, --repetition-penalty and --seed (generate and chat).
runtime::SamplingOptions parse_sampling_flags(const CliArgs& args);

// The flags `lorakv generate` takes.
const std::set<std::string>& generate_value_flags();
const std::set<std::string>& generate_bool_flags();

}  // namespace lorakv::cli

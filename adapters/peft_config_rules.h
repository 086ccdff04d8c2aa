// adapters/peft_config_rules.h: the target rules of a PEFT adapter_config.json and how
// they pick modules, as PEFT's own check_target_module_exists / get_pattern_key (peft
// 0.21) do, on module paths such as "model.layers.3.self_attn.q_proj". Torch-free, so
// the config reader can be fuzzed on its own (fuzz/).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lorakv/formats/json.h"

namespace lorakv::adapters {

// Parsed target rules of one adapter_config.json.
struct PeftRules {
  std::string file;
  int64_t r = 8;
  double alpha = 8;
  bool rslora = false;
  bool all_linear = false;
  std::optional<std::string> target_regex;
  std::vector<std::string> target_list;
  std::optional<std::string> exclude_regex;
  std::vector<std::string> exclude_list;
  std::optional<std::vector<int64_t>> layers;  // layers_to_transform
  std::vector<std::string> layers_pattern;
  std::vector<std::pair<std::string, int64_t>> rank_pattern;
  std::vector<std::pair<std::string, double>> alpha_pattern;
  std::vector<int32_t> invocation_tokens;  // alora_invocation_tokens; empty: a standard LoRA
};

// Reads the rules from the parsed config of `file`, for a base model of `num_layers`
// layers. Throws AdapterLoadError naming the field for every PEFT feature lorakv does not
// apply, and ConfigError for a mistyped value.
PeftRules parse_peft_rules(const std::string& file, const formats::JsonValue& cfg, int64_t num_layers);

// alora_invocation_tokens of the parsed config of `file`: empty when absent or null. Throws
// AdapterLoadError naming the field for an empty list, a value that is not a list, or an
// entry that is not an integer in [0, 2^31). Not checked against a vocabulary.
std::vector<int32_t> parse_invocation_tokens(const std::string& file, const formats::JsonValue& cfg);

// Whether the rules adapt the module at `path` (of layer `layer`). Throws
// AdapterLoadError for a regular expression lorakv cannot compile.
bool is_targeted(const PeftRules& rules, const std::string& path, int64_t layer);

// The rank_pattern / alpha_pattern value for `path`, nullopt when no pattern matches.
std::optional<int64_t> pattern_rank(const PeftRules& rules, const std::string& path);
std::optional<double> pattern_alpha(const PeftRules& rules, const std::string& path);

}  // namespace lorakv::adapters

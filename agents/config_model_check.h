// agents/config_model_check.h: the second, model-aware check of a session config
// (lorakv/agents/config/), run by `lorakv run --check` and before a run, still before any
// model weights load: the model's header (GGUF metadata or config.json) and tokenizer,
// every adapter parsed and checked against the model's shape, each agent's turn header
// built, and the sharing mode asked, with the engine's own rule (runtime::check_reader),
// whether it can serve the agents' adapters side by side on one trajectory. A refusal is
// the loader's or engine's message rethrown as a ConfigFileError at the YAML place of the
// key it is about (model.path, adapters.<name>, agents.<name>.adapter).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lorakv/agents/config/session_config.h"

namespace lorakv::agents {

// What the check read, for `--check` to print.
struct ConfigModelReport {
  std::string architecture;  // e.g. "llama"
  std::string model_name;
  int64_t num_layers = 0, hidden = 0, context_length = 0, vocab_size = 0;
  struct AdapterInfo {
    std::string name;
    std::string format;  // "peft", "gguf-lora"
    std::vector<std::string> modules;  // q_proj, v_proj...
    int64_t max_rank = 0;
    int64_t bytes = 0;
  };
  std::vector<AdapterInfo> adapters;
};

// Throws config::ConfigFileError (see above). Reads adapter tensors (small), never the
// model's weights.
ConfigModelReport check_config_against_model(const config::SessionConfig& config);

}  // namespace lorakv::agents

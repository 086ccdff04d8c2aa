// agents/config/load_session_config.h: what the command line (`lorakv run CONFIG.yaml`,
// `lorakv run --check CONFIG.yaml`) and programs call: load and validate a session config
// in one place, before any model weights load, and print the effective configuration.
// Every refusal is a ConfigFileError naming file:line:col, the key path and a hint.
#pragma once

#include <string>

#include "lorakv/agents/config/session_config.h"

namespace lorakv::agents::config {

// Reads, parses and validates the YAML file at `path` (errors name it as given); relative
// paths inside resolve against its folder. Checks that the files it names exist and have
// the right form (a GGUF magic, a PEFT folder), reads the lookup tools' documents_file,
// and checks every reference between keys. Throws ConfigFileError.
SessionConfig load_session_config(const std::string& path);

// The same on text already in memory (tests, the fuzzer): `virtual_name` stands for the
// file in errors, `base_dir` is the folder relative paths start at (the current folder
// when empty).
SessionConfig load_session_config_from_string(const std::string& text, const std::string& virtual_name,
                                               const std::string& base_dir);

// The configuration as the runner will use it, as YAML: every key with its default
// filled in, every path resolved, the agents' private instructions shown as comments.
// Loading it again gives the same configuration.
std::string effective_config_yaml(const SessionConfig& config);

}  // namespace lorakv::agents::config

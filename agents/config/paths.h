// agents/config/paths.h: the config's paths as the loader resolves them, and the checks
// that the files they name are there. A path is expanded, then resolved:
//   `~` or `~/...` at the start: $HOME (unset HOME is an error);
//   `${NAME}` anywhere: the environment variable NAME (unset is an error naming it);
//   a relative result is taken from the YAML file's folder, never the current one;
//   the result is absolute and lexically normal (no `.` or `..` steps).
#pragma once

#include <string>

#include "lorakv/agents/config/config_reader.h"

namespace lorakv::agents::config {

// The folder a config's relative paths resolve against: `folder` made absolute and
// lexically normal, without a trailing slash (the current folder when empty).
std::string config_base_dir(const std::string& folder);
// The same for the folder holding the config file `path`.
std::string config_base_dir_of_file(const std::string& path);

// The resolved path of the text in `f`. Throws ConfigFileError for an empty path, an
// unset variable or HOME, or a `${` without its `}`.
std::string resolve_path(const ConfigReader& r, const Field& f);

// Each throws ConfigFileError at `f`, printing the resolved `path`, when it is not so.
void require_model_path(const ConfigReader& r, const Field& f, const std::string& path);    // GGUF file or HF dir
void require_adapter_path(const ConfigReader& r, const Field& f, const std::string& path);  // PEFT dir or GGUF LoRA
void require_regular_file(const ConfigReader& r, const Field& f, const std::string& path, const std::string& what);
void require_parent_folder(const ConfigReader& r, const Field& f, const std::string& path);  // a file to write

}  // namespace lorakv::agents::config

// agents/config/paths.cpp: expanding and resolving the config's paths, and checking what
// they name before any model weights load.
#include "lorakv/agents/config/paths.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace lorakv::agents::config {
namespace fs = std::filesystem;
namespace {

bool is_name_char(char c, bool first) {
  return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (!first && c >= '0' && c <= '9');
}

// `${NAME}` replaced from the environment.
std::string expand_variables(const ConfigReader& r, const Field& f, const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "${") != 0) {
      out += text[i++];
      continue;
    }
    const size_t close = text.find('}', i + 2);
    const std::string name = close == std::string::npos ? "" : text.substr(i + 2, close - i - 2);
    bool valid = !name.empty();
    for (size_t k = 0; k < name.size(); ++k) valid = valid && is_name_char(name[k], k == 0);
    if (!valid) {
      r.fail(f.node.mark, f.path, "`" + f.path + "` has a `${` that is not a variable like ${NAME}",
             "variable names are letters, digits and _, closed by }");
    }
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) {
      r.fail(f.node.mark, f.path, "`" + f.path + "` names the environment variable " + name + ", which is not set",
             "set " + name + " or write the path out");
    }
    out += value;
    i = close + 1;
  }
  return out;
}

std::string expand_home(const ConfigReader& r, const Field& f, const std::string& text) {
  if (text != "~" && text.rfind("~/", 0) != 0) return text;
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    r.fail(f.node.mark, f.path, "`" + f.path + "` starts with ~, but HOME is not set", "write the path out");
  }
  return std::string(home) + text.substr(1);
}

[[noreturn]] void missing(const ConfigReader& r, const Field& f, const std::string& what, const std::string& path,
                          const std::string& problem, const std::string& hint) {
  r.fail(f.node.mark, f.path, "`" + f.path + "`: " + what + " '" + path + "' " + problem, hint);
}

bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string(magic, 4) == "GGUF";
}

const char* const kRelativeHint = "relative paths start at the folder of the YAML file";

}  // namespace

std::string resolve_path(const ConfigReader& r, const Field& f) {
  const std::string written = read_text(r, f);
  if (written.empty()) r.fail(f.node.mark, f.path, "`" + f.path + "` is an empty path");
  for (char c : written) {
    if (static_cast<unsigned char>(c) < 0x20) {
      r.fail(f.node.mark, f.path, "`" + f.path + "` holds a control character", "a path is one line of text");
    }
  }
  const fs::path expanded = expand_variables(r, f, expand_home(r, f, written));
  const fs::path resolved = expanded.is_absolute() ? expanded : fs::path(r.base_dir()) / expanded;
  return resolved.lexically_normal().string();
}

void require_model_path(const ConfigReader& r, const Field& f, const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) {
    missing(r, f, "the model", path, "does not exist",
            std::string(kRelativeHint) + "; tools/fetch_model.sh downloads the SmolLM2 GGUF into models/");
  }
  if (fs::is_directory(status)) {
    if (!fs::is_regular_file(fs::path(path) / "config.json", ec)) {
      missing(r, f, "the model folder", path, "has no config.json", "name a GGUF file or a Hugging Face checkpoint folder");
    }
    return;
  }
  if (!fs::is_regular_file(status) || !starts_with_gguf_magic(path)) {
    missing(r, f, "the model", path, "is not a GGUF file", "name a GGUF file or a Hugging Face checkpoint folder");
  }
}

void require_adapter_path(const ConfigReader& r, const Field& f, const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  const std::string hint = "an adapter is a PEFT folder (adapter_config.json) or a GGUF LoRA file";
  if (!fs::exists(status)) missing(r, f, "the adapter", path, "does not exist", std::string(kRelativeHint));
  if (fs::is_directory(status)) {
    if (!fs::is_regular_file(fs::path(path) / "adapter_config.json", ec)) {
      missing(r, f, "the adapter folder", path, "has no adapter_config.json", hint);
    }
    return;
  }
  const std::string file_name = fs::path(path).filename().string();
  const bool peft_file = file_name == "adapter_config.json" || file_name == "adapter_model.safetensors";
  if (!fs::is_regular_file(status) || !(peft_file || starts_with_gguf_magic(path))) {
    missing(r, f, "the adapter", path, "is neither a PEFT folder nor a GGUF file", hint);
  }
}

void require_regular_file(const ConfigReader& r, const Field& f, const std::string& path, const std::string& what) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) missing(r, f, what, path, "does not exist", kRelativeHint);
  if (!fs::is_regular_file(status)) missing(r, f, what, path, "is not a regular file", "name a file");
}

void require_parent_folder(const ConfigReader& r, const Field& f, const std::string& path) {
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!fs::is_directory(parent, ec)) {
    missing(r, f, "the folder of", path, "does not exist", "create the folder first; " + std::string(kRelativeHint));
  }
  if (fs::is_directory(path, ec)) missing(r, f, "the output", path, "is a directory", "name a file");
}

std::string config_base_dir(const std::string& folder) {
  std::filesystem::path absolute =
      std::filesystem::absolute(folder.empty() ? std::filesystem::path(".") : std::filesystem::path(folder)).lexically_normal();
  std::string text = absolute.string();
  while (text.size() > 1 && text.back() == '/') text.pop_back();
  return text;
}

std::string config_base_dir_of_file(const std::string& path) {
  return config_base_dir(std::filesystem::path(path).parent_path().string());
}

}  // namespace lorakv::agents::config

// cli/generate_options.cpp: every check of `lorakv generate`'s flags that needs no model.
#include "lorakv/cli/generate_options.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "lorakv/cli/eviction_flags.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/chat_template.h"
#include "lorakv/runtime/loaded_model.h"

namespace lorakv::cli {
namespace {
namespace fs = std::filesystem;

const char* kHelpHint = "see 'lorakv generate --help'";

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

void require_path(const std::string& flag, const std::string& path, const std::string& what, const std::string& hint) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ConfigError("no such file or folder", {path, flag, what, "nothing there", hint});
}

// When `path` is a folder, the files in it that loading will open must be there: a missing
// one is found now rather than after the model has loaded.
void require_files_in_folder(const std::string& flag, const std::string& path, const std::vector<std::string>& files,
                             const std::string& hint) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return;
  for (const std::string& f : files) {
    if (!fs::exists(fs::path(path) / f, ec)) {
      throw ConfigError("a file is missing from the folder", {path, flag, f, "no " + f, hint});
    }
  }
}

// --use once (every prompt) or once per prompt, each naming a given adapter or "base".
std::vector<std::string> parse_uses(const CliArgs& a, size_t num_prompts, const std::vector<AdapterSpec>& adapters) {
  std::vector<std::string> uses = a.get_all("--use");
  if (uses.size() > 1 && uses.size() != num_prompts) {
    throw UsageError("--use must be given once or once per --prompt",
                      {"", "--use", "1 or " + std::to_string(num_prompts) + " values (one per --prompt)",
                       std::to_string(uses.size()) + " values", kHelpHint});
  }
  std::vector<std::string> known = {kBaseAdapterName};
  for (const AdapterSpec& s : adapters) known.push_back(s.name);
  for (const std::string& use : uses) {
    if (std::find(known.begin(), known.end(), use) != known.end()) continue;
    throw UsageError("--use names no adapter", {"", "--use", "one of: " + joined(known), "'" + use + "'",
                                                 "load it with --adapter " + use + "=PATH"});
  }
  // No --use: the one adapter loaded, when there is one; with several, say which.
  if (uses.empty() && adapters.size() == 1) uses.push_back(adapters.front().name);
  if (uses.empty() && adapters.size() > 1) {
    throw UsageError("several adapters are loaded and --use names none",
                      {"", "--use", "one of: " + joined(known), "no --use",
                       "add --use NAME (--use base runs the model without an adapter)"});
  }
  if (uses.size() == 1) uses.assign(num_prompts, uses[0]);
  return uses;
}

// A stop string as typed: \n, \t, \r and \\ stand for a newline, a tab, a carriage return
// and a backslash (a shell passes "\n" as two characters).
std::string unescaped_stop(const std::string& typed) {
  std::string out;
  for (size_t i = 0; i < typed.size(); ++i) {
    if (typed[i] != '\\') {
      out += typed[i];
      continue;
    }
    const char next = i + 1 < typed.size() ? typed[i + 1] : '\0';
    const std::string known = "ntr\\";
    if (next == '\0' || known.find(next) == std::string::npos) {
      throw UsageError("unknown escape in a stop string", {"", "--stop", "\\n, \\t, \\r or \\\\", "'" + typed + "'",
                                                            "write a backslash as \\\\"});
    }
    out += next == 'n' ? '\n' : next == 't' ? '\t' : next == 'r' ? '\r' : '\\';
    ++i;
  }
  return out;
}

std::vector<std::string> parse_stops(const CliArgs& a) {
  std::vector<std::string> stops;
  for (const std::string& s : a.get_all("--stop")) {
    if (s.empty()) throw UsageError("empty stop string", {"", "--stop", "a non-empty string", "\"\"", kHelpHint});
    stops.push_back(unescaped_stop(s));
  }
  return stops;
}

// The prompts: each --prompt (`-`: standard input, read once), then each --prompt-file's text.
std::vector<std::string> parse_prompts(const CliArgs& a, std::istream& standard_input) {
  std::vector<std::string> prompts = a.get_all("--prompt");
  bool read_stdin = false;
  for (std::string& p : prompts) {
    if (p != "-") continue;
    if (read_stdin) throw UsageError("standard input is read once", {"", "--prompt", "one --prompt -", "two", kHelpHint});
    read_stdin = true;
    p.assign(std::istreambuf_iterator<char>(standard_input), std::istreambuf_iterator<char>());
  }
  for (const std::string& path : a.get_all("--prompt-file")) {
    require_path("--prompt-file", path, "a text file holding a prompt", "check the path");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ConfigError("cannot read the prompt file", {path, "--prompt-file", "a readable file", "", "check its permissions"});
    prompts.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (prompts.empty()) a.require("--prompt");  // throws naming the flag
  for (const std::string& p : prompts) {
    if (p.empty()) throw ConfigError("the prompt is empty", {"", "--prompt", "some text", "\"\"", ""});
  }
  return prompts;
}

}  // namespace

std::string parse_model_flag(const CliArgs& a) {
  std::string path = a.require("--model");
  require_path("--model", path, "a GGUF file or a Hugging Face checkpoint folder",
               "e.g. --model models/SmolLM2-135M-Instruct.Q4_1.gguf");
  // Text needs a tokenizer; a checkpoint folder keeps it in tokenizer.json (weights and
  // config.json are the loader's to check, with their own messages).
  require_files_in_folder("--model", path, {"tokenizer.json"}, "text needs the checkpoint's tokenizer.json beside config.json");
  return path;
}

std::vector<AdapterSpec> parse_adapter_flags(const CliArgs& a) {
  std::vector<AdapterSpec> specs;
  std::set<std::string> names;
  for (const std::string& spec : a.get_all("--adapter")) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      throw UsageError("bad --adapter value", {"", "--adapter", "NAME=PATH", "'" + spec + "'",
                                                "e.g. --adapter planner=assets/role_adapters/qv_shared_a/planner"});
    }
    AdapterSpec s{spec.substr(0, eq), spec.substr(eq + 1)};
    if (s.name == kBaseAdapterName) {
      throw UsageError("the adapter name 'base' is reserved", {"", "--adapter", "another name", "'" + spec + "'",
                                                                 "--use base means the model without an adapter"});
    }
    if (!names.insert(s.name).second) {
      throw UsageError("two adapters with one name", {"", "--adapter", "distinct names", "'" + s.name + "' twice",
                                                       "give each --adapter its own NAME"});
    }
    require_path("--adapter", s.path, "a PEFT adapter folder or a GGUF LoRA file for '" + s.name + "'",
                 "check the path after '" + s.name + "='");
    require_files_in_folder("--adapter", s.path, {"adapter_config.json", "adapter_model.safetensors"},
                            "a PEFT adapter folder holds both (PEFT's save_pretrained writes them)");
    specs.push_back(std::move(s));
  }
  return specs;
}

runtime::SamplingOptions parse_sampling_flags(const CliArgs& a) {
  runtime::SamplingOptions s;
  s.temperature = a.get_double("--temperature", 0.0, 0.0, 100.0);
  s.top_k = a.get_int("--top-k", 0, 0, 1 << 30);
  s.top_p = a.get_double("--top-p", 1.0, 1e-6, 1.0);
  s.repetition_penalty = a.get_double("--repetition-penalty", 1.0, 1e-3, 100.0);
  s.seed = static_cast<uint64_t>(a.get_int("--seed", 0, 0, INT64_MAX));
  return s;
}

const std::set<std::string>& generate_value_flags() {
  static const std::set<std::string> flags = [] {
    std::set<std::string> f = {"--model", "--prompt", "--prompt-file", "--max-tokens", "--temperature", "--top-k",
                               "--top-p", "--repetition-penalty", "--seed", "--stop", "--dtype",
                               "--weights", "--log-level", "--adapter", "--use", "--chat-format", "--kv-dtype", "--threads"};
    f.insert(eviction_value_flags().begin(), eviction_value_flags().end());
    return f;
  }();
  return flags;
}

const std::set<std::string>& generate_bool_flags() {
  static const std::set<std::string> flags = [] {
    std::set<std::string> f = {"--chat", "--logprobs", "--memory", "--help", "--rerotate", "--per-head", "--json"};
    f.insert(eviction_bool_flags().begin(), eviction_bool_flags().end());
    return f;
  }();
  return flags;
}

GenerateOptions parse_generate_options(const CliArgs& a, std::istream& standard_input) {
  GenerateOptions o;
  if (!a.positional().empty()) {
    throw UsageError("unexpected argument", {"", a.positional().front(), "flags only", "", kHelpHint});
  }
  if (auto level = a.get("--log-level")) o.log_level = for_flag("--log-level", kHelpHint, [&] { return log::parse_level(*level); });
  o.model_path = parse_model_flag(a);
  o.prompts = parse_prompts(a, standard_input);
  o.adapters = parse_adapter_flags(a);
  o.uses = parse_uses(a, o.prompts.size(), o.adapters);
  o.chat = a.has("--chat");
  if (auto format = a.get("--chat-format")) {
    if (!o.chat) throw UsageError("--chat-format needs --chat", {"", "--chat-format", "--chat as well", "", "add --chat"});
    for_flag("--chat-format", kHelpHint, [&] { return formats::ChatTemplate::by_name(*format); });
    o.chat_format = *format;
  }
  o.dtype = for_flag("--dtype", kHelpHint, [&] { return runtime::parse_model_dtype(a.get("--dtype").value_or("float32")); });
  if (auto kv = a.get("--kv-dtype")) o.kv_dtype = for_flag("--kv-dtype", kHelpHint, [&] { return runtime::parse_kv_dtype(*kv, "--kv-dtype"); });
  o.weights = for_flag("--weights", kHelpHint, [&] { return runtime::parse_weight_form(a.get("--weights").value_or("native")); });
  o.request.max_tokens = a.get_int("--max-tokens", 128, 1, 100000);
  o.request.sampling = parse_sampling_flags(a);
  o.request.stop_strings = parse_stops(a);
  o.request.logprobs = a.has("--logprobs");
  o.eviction = parse_eviction_flags(a);
  o.print_memory = a.has("--memory");
  o.json = a.has("--json");
  o.rerotate = a.has("--rerotate");
  o.per_head_token_sets = a.has("--per-head");
  o.threads = static_cast<int>(a.get_int("--threads", 0, 0, 4096));
  return o;
}

}  // namespace lorakv::cli

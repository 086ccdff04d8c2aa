// cli/perplexity_options.cpp: every check of `lorakv perplexity`'s flags that needs no model.
#include "lorakv/cli/perplexity_options.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "lorakv/cli/eviction_flags.h"
#include "lorakv/common/errors.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/loaded_model.h"

namespace lorakv::cli {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kMaxTokens = int64_t{1} << 24;


void require_model(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw ConfigError("no such file or folder",
                      {path, "--model", "a GGUF file or a Hugging Face checkpoint folder", "nothing there",
                       "e.g. --model models/SmolLM2-135M-Instruct.Q4_1.gguf"});
  }
}

// The --dump-kept file is written after the run: its folder must exist now, so that a typo
// fails before minutes of scoring, and the name must not be a folder.
void require_writable_folder(const std::string& path) {
  std::error_code ec;
  if (path.empty() || fs::is_directory(path, ec)) {
    throw ConfigError("not a file name", {path, "--dump-kept", "a file to write", path.empty() ? "nothing" : "a folder", ""});
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    throw ConfigError("no such folder", {parent.string(), "--dump-kept", "an existing folder", "nothing there", ""});
  }
}

// The whole of the --file text; a folder, a missing or unreadable file, or no text is refused.
std::string read_text(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) throw ConfigError("no such file", {path, "--file", "a text file", "nothing there", ""});
  if (fs::is_directory(status)) {
    throw ConfigError("the text is a folder", {path, "--file", "a text file", "a folder", "name a file in it"});
  }
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad()) {
    throw ConfigError("cannot read the text file", {path, "--file", "a readable file", "", "check its permissions"});
  }
  return text;
}

}  // namespace

const std::set<std::string>& perplexity_value_flags() {
  static const std::set<std::string> flags = [] {
    std::set<std::string> f = {"--model", "--file",    "--chunk",     "--context",  "--threads",
                               "--dtype", "--weights", "--log-level", "--dump-kept", "--kv-dtype"};
    f.insert(eviction_value_flags().begin(), eviction_value_flags().end());
    return f;
  }();
  return flags;
}

const std::set<std::string>& perplexity_bool_flags() {
  static const std::set<std::string> flags = [] {
    std::set<std::string> f = {"--json", "--per-head", "--help", "--rerotate"};
    f.insert(eviction_bool_flags().begin(), eviction_bool_flags().end());
    return f;
  }();
  return flags;
}

PerplexityOptions parse_perplexity_options(const CliArgs& a) {
  PerplexityOptions o;
  if (!a.positional().empty()) {
    throw UsageError("unexpected argument", {"", a.positional().front(), "flags only", "", a.help_hint()});
  }
  if (auto level = a.get("--log-level")) o.log_level = log::parse_level(*level);
  o.model_path = a.require("--model");
  require_model(o.model_path);
  o.text_path = a.require("--file");
  o.eviction = parse_eviction_flags(a);
  o.context = a.get_int("--context", o.context, 2, kMaxTokens);
  o.chunk = a.get_int("--chunk", o.chunk, 1, kMaxTokens);
  o.threads = a.get_int("--threads", 0, 1, 4096);
  o.json = a.has("--json");
  o.per_head_token_sets = a.has("--per-head");
  o.rerotate = a.has("--rerotate");
  if (auto dump = a.get("--dump-kept")) {
    o.dump_kept_path = *dump;
    require_writable_folder(o.dump_kept_path);
  }
  o.dtype = for_flag("--dtype", a.help_hint(), [&] { return runtime::parse_model_dtype(a.get("--dtype").value_or("float32")); });
  if (a.get("--kv-dtype")) {
    o.kv_dtype = for_flag("--kv-dtype", a.help_hint(), [&] { return runtime::parse_kv_dtype(*a.get("--kv-dtype"), "--kv-dtype"); });
  }
  o.weights =
      for_flag("--weights", a.help_hint(), [&] { return runtime::parse_weight_form(a.get("--weights").value_or("native")); });
  o.text = read_text(o.text_path);  // last: every flag's mistake is named before the file is read
  if (o.text.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw ConfigError("the text file holds no text",
                      {o.text_path, "--file", "some text", "no text (empty or only white space)", ""});
  }
  return o;
}

std::vector<std::pair<int64_t, int64_t>> plan_windows(int64_t num_tokens, int64_t context, int64_t chunk) {
  std::vector<std::pair<int64_t, int64_t>> windows;
  int64_t begin = 0;
  for (; begin + context <= num_tokens; begin += context) windows.emplace_back(begin, begin + context);
  const int64_t rest = num_tokens - begin;
  const bool whole_text = windows.empty() && rest >= 2;
  if (whole_text || (rest >= 2 && rest >= std::min(chunk, context))) windows.emplace_back(begin, num_tokens);
  return windows;
}

}  // namespace lorakv::cli

// cli/serve_command.cpp: `lorakv serve`: the OpenAI-compatible server (server/) over one
// Runtime, from flags or a YAML file (configs/README.md, "Serving"). The listener starts
// before the weights load (/health: 503, then 200); SIGTERM or Ctrl-C stops it gracefully.
#include <pthread.h>

#include <csignal>
#include <filesystem>
#include <iostream>

#include "lorakv/agents/config/config_reader.h"
#include "lorakv/agents/config/load_session_config.h"
#include "lorakv/agents/config_model_check.h"
#include "lorakv/agents/config_options.h"
#include "lorakv/agents/runtime.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/cli/generate_options.h"
#include "lorakv/common/logging.h"
#include "lorakv/formats/json.h"
#include "lorakv/server/config/server_config.h"
#include "lorakv/server/openai_server.h"

namespace lorakv::cli {
namespace {

const char* kHelp = R"(usage: lorakv serve --model FILE [--adapter NAME=PATH ...] [flags]
       lorakv serve --config FILE.yaml [flags]

An OpenAI-compatible HTTP server (docs/serving.md): POST /v1/chat/completions and
/v1/completions, where the request's `model` is the base model's name or an adapter's;
GET /v1/models, /health (503 while the model loads) and, with --metrics, /metrics. Requests
share cached rows through the prefix index, in the cache mode of --cache-mode (or the
config's `cache`). SIGTERM or Ctrl-C: running requests get the shutdown grace to finish.

flags:
  --model FILE            GGUF file or Hugging Face checkpoint folder
  --adapter NAME=PATH     a PEFT adapter folder or GGUF LoRA file, served as model NAME
                          (repeat for more)
  --config FILE.yaml      model, adapters, cache and server keys from a file instead
  --host ADDR             address to listen on (default 127.0.0.1: this machine only)
  --port N                port (default 8000; 0: any free port, printed at start)
  --api-key KEY           require "Authorization: Bearer KEY" (also LORAKV_API_KEY)
  --model-name NAME       the base model's id (default: the model file's name, no suffix)
  --cache-mode MODE       full, full_shared, base_shared or base_lr_shared (default full)
  --cache-writer W        first, base or author (default first)
  --metrics               serve GET /metrics (Prometheus text)
  --max-tokens N          most tokens a request may ask for, and a chat request's default
  --max-running N         requests answered at once; more get 429
  --max-waiting N         replies waiting for room in the KV pools; more get 503
  --max-prompt-tokens N   longest prompt accepted (default: the model's context)
  --request-timeout S     seconds a request may run (0: none)
  --threads N             libtorch's threads (0: its default)
  --log-level LEVEL       trace, debug, info, warn, error or off (default info, on stderr)
)";

std::string yaml_quoted(const std::string& text) { return formats::JsonValue::make_string(text).to_string(); }

// The config the flags describe, as YAML for the one loader (as `lorakv chat` does).
std::string flags_config_yaml(const CliArgs& a) {
  const std::string model = parse_model_flag(a);
  std::string y = "model: {path: " + yaml_quoted(std::filesystem::absolute(model).string()) + "}\n";
  const std::vector<AdapterSpec> adapters = parse_adapter_flags(a);
  if (!adapters.empty()) {
    y += "adapters:\n";
    for (const AdapterSpec& s : adapters) {
      y += "  " + yaml_quoted(s.name) + ": " + yaml_quoted(std::filesystem::absolute(s.path).string()) + "\n";
    }
  }
  return y;
}

server::config::ServerConfig load_config(const CliArgs& a) {
  server::config::ServerConfig c;
  if (auto path = a.get("--config")) {
    if (a.has("--model") || a.has("--adapter")) {
      throw UsageError("--config names the model and adapters", {"", "--model", "either --config or --model",
                                                                "both", "put the adapters in the file's `adapters`"});
    }
    c = server::config::load_server_config(*path);
  } else {
    c = server::config::load_server_config_from_string(flags_config_yaml(a), "lorakv serve's flags", "");
  }
  auto& cache = c.runtime.cache;
  if (auto mode = a.get("--cache-mode")) cache.mode = *mode;
  if (auto writer = a.get("--cache-writer")) cache.writer = *writer;
  if (auto threads = a.get("--threads")) c.runtime.model.threads = static_cast<int>(a.get_int("--threads", 0, 0, 4096));
  server::config::ServerSettings& s = c.server;
  if (auto host = a.get("--host")) s.host = *host;
  s.port = static_cast<int>(a.get_int("--port", s.port, 0, 65535));
  if (const char* env = std::getenv("LORAKV_API_KEY")) s.api_key = env;
  if (auto key = a.get("--api-key")) s.api_key = *key;
  if (auto name = a.get("--model-name")) s.model_name = *name;
  if (a.has("--metrics")) s.metrics = true;
  server::config::ServerLimits& l = s.limits;
  l.max_tokens = a.get_int("--max-tokens", l.max_tokens, 1, int64_t{1} << 30);
  l.max_running_requests = a.get_int("--max-running", l.max_running_requests, 1, 4096);
  l.max_waiting_requests = a.get_int("--max-waiting", l.max_waiting_requests, 1, 1 << 20);
  l.max_prompt_tokens = a.get_int("--max-prompt-tokens", l.max_prompt_tokens, 0, int64_t{1} << 30);
  l.request_timeout = std::chrono::seconds(a.get_int("--request-timeout", l.request_timeout.count(), 0, 7 * 24 * 3600));
  return c;
}

// The same checks `lorakv run --check` makes on a session file, names mapped to the flags.
void check_names(const server::config::ServerConfig& c) {
  auto in = [](const std::string& v, const std::vector<std::string>& names) {
    return std::find(names.begin(), names.end(), v) != names.end();
  };
  if (!in(c.runtime.cache.mode, agents::config::cache_mode_names())) {
    throw UsageError("unknown cache mode", {"", "--cache-mode", agents::config::join_names(agents::config::cache_mode_names()),
                                            c.runtime.cache.mode});
  }
  if (!in(c.runtime.cache.writer, agents::config::cache_writer_names())) {
    throw UsageError("unknown cache writer", {"", "--cache-writer",
                                              agents::config::join_names(agents::config::cache_writer_names()),
                                              c.runtime.cache.writer});
  }
}

std::string default_model_name(const std::string& path) {
  std::filesystem::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // a folder written with a slash
  return p.stem().string();
}

}  // namespace

int run_serve(const std::vector<std::string>& args, std::ostream& out, std::ostream&) {
  const CliArgs a(args,
                  {"--model", "--adapter", "--config", "--host", "--port", "--api-key", "--model-name", "--cache-mode",
                   "--cache-writer", "--max-tokens", "--max-running", "--max-waiting", "--max-prompt-tokens",
                   "--request-timeout", "--threads", "--log-level"},
                  {"--metrics", "--help"}, "serve");
  if (a.has("--help")) {
    out << kHelp;
    return 0;
  }
  if (!a.positional().empty()) throw UsageError("unexpected argument", {"", a.positional().front(), "flags only", "", a.help_hint()});
  if (auto level = a.get("--log-level")) log::set_level(for_flag("--log-level", a.help_hint(), [&] { return log::parse_level(*level); }));
  const server::config::ServerConfig c = load_config(a);
  check_names(c);
  agents::check_config_against_model(c.runtime);  // headers only: adapters fit, pools fit

  // SIGTERM and SIGINT wait for sigwait below: blocked before any thread starts, so every
  // thread inherits the mask and none is interrupted.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  server::ServerOptions options;
  static_cast<server::config::ServerSettings&>(options) = c.server;
  options.sharing = agents::session_options(c.runtime);
  server::OpenAiServer http(options);
  const int port = http.start();
  out << "lorakv serve: listening on http://" << c.server.host << ":" << port << std::endl;

  agents::RuntimeOptions runtime_options = agents::runtime_options(c.runtime);
  runtime_options.max_waiting_calls = c.server.limits.max_waiting_requests;
  runtime_options.max_admission_wait = c.server.limits.max_queue_wait;
  auto runtime = std::make_shared<agents::Runtime>(runtime_options);
  for (const auto& adapter : c.runtime.adapters) runtime->load_adapter(adapter.name, adapter.path);
  const std::string name = c.server.model_name.empty() ? default_model_name(c.runtime.model.path) : c.server.model_name;
  http.attach(runtime, name);
  out << "lorakv serve: ready: model " << name << ", " << c.runtime.adapters.size() << " adapters" << std::endl;

  int signal = 0;
  sigwait(&stop_signals, &signal);
  out << "lorakv serve: " << (signal == SIGTERM ? "SIGTERM" : "SIGINT") << ": stopping" << std::endl;
  http.shutdown(c.server.shutdown_grace);
  return 0;
}

}  // namespace lorakv::cli

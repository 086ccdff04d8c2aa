// server/openai_server.h: `lorakv serve`'s HTTP server: OpenAI's chat and text completions
// where `model` picks the adapter, GET /v1/models, /health and /metrics, over one Runtime
// (docs/serving.md). The listener starts before the model loads (/health answers 503 until
// attach), so an orchestrator can wait on it.
//
//   OpenAiServer server(options);
//   server.start();                                // listening; 503 while loading
//   auto runtime = std::make_shared<agents::Runtime>(runtime_options);
//   runtime->load_adapter("planner", "adapters/planner");
//   server.attach(runtime, "SmolLM2-135M-Instruct");   // serving
//   ...
//   server.shutdown(std::chrono::seconds(10));     // running requests finish or are cancelled
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "lorakv/agents/runtime.h"
#include "lorakv/server/server_options.h"

namespace httplib {
class Server;
}

namespace lorakv::server {

class ServerState;

class OpenAiServer {
 public:
  explicit OpenAiServer(ServerOptions options);  // checks the options (ConfigError)
  ~OpenAiServer();                               // shutdown with no grace if still running
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Binds host:port and serves on a thread of its own; returns the port (the one chosen
  // when options.port is 0). Throws SystemError when it cannot bind.
  int start();
  // Serves `runtime` from now on: its base model as `base_model_name`, each loaded adapter
  // under its own name.
  void attach(std::shared_ptr<agents::Runtime> runtime, const std::string& base_model_name);
  // Takes no new request (503), lets the running ones finish for up to `grace`, cancels
  // the rest, then closes the listener. Idempotent.
  void shutdown(std::chrono::milliseconds grace);

  int port() const { return port_; }
  bool running() const;

 private:
  void add_routes();

  std::shared_ptr<ServerState> state_;
  std::unique_ptr<httplib::Server> http_;
  std::thread listener_;
  int port_ = 0;
};

}  // namespace lorakv::server

// server/config/server_settings.h: the server's own settings (the YAML's `server` group,
// the command line's flags): where it listens, who may call it, and its limits. Every
// default is here, once; torch-free, so the config loader and its tests need no libtorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace lorakv::server::config {

struct ServerLimits {
  int64_t max_body_bytes = int64_t{4} << 20;  // a larger body: 413
  int64_t max_prompt_tokens = 0;              // 0: the model's context bounds it; over: 400
  // The most max_tokens a request may ask (over: 400), and a chat request's max_tokens when
  // it names none (a text completion's default, 16, is OpenAI's).
  int64_t max_tokens = 2048;
  int64_t max_n = 16;                  // replies per request (the runtime's most)
  int64_t max_running_requests = 64;   // requests being answered at once; more: 429
  int64_t max_waiting_requests = 256;  // replies waiting for room in the KV pools; more: 503
  std::chrono::seconds max_queue_wait{60};    // waiting for room longer: 503
  std::chrono::seconds request_timeout{600};  // a reply running longer ends ("length"); 0: none
};

struct ServerSettings {
  std::string host = "127.0.0.1";  // loopback only unless told otherwise
  int port = 8000;                 // 0: any free port
  std::string api_key;             // non-empty: every request but /health needs "Bearer <key>"
  std::string model_name;          // the base model's id in /v1/models; empty: the file's stem
  bool metrics = false;            // GET /metrics (Prometheus text)
  ServerLimits limits;
  std::chrono::seconds shutdown_grace{10};  // on SIGTERM: running requests get this long
};

}  // namespace lorakv::server::config

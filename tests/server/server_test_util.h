// tests/server/server_test_util.h: an OpenAiServer on a free loopback port over the real
// model with two role adapters, and a small HTTP client for its JSON and server-sent events.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lorakv/agents/runtime.h"
#include "lorakv/server/openai_server.h"
#include "tests/agents/session_test_util.h"

namespace lorakv::server::testing {

using nlohmann::json;

// The base model's id in these tests.
inline constexpr const char* kBase = "smollm2";

struct Reply {
  int status = 0;
  json body;                // the parsed body (null when it is not JSON)
  std::string text;         // the raw body
  httplib::Headers headers;
};

// A running server and its runtime. Each test makes its own when it needs other options.
class TestServer {
 public:
  explicit TestServer(ServerOptions options = default_options(),
                      agents::RuntimeOptions runtime_options = agents::testing::real_model_options()) {
    options.port = 0;
    server_ = std::make_unique<OpenAiServer>(options);
    port_ = server_->start();
    runtime_ = std::make_shared<agents::Runtime>(runtime_options);
    for (const char* role : {"planner", "actor"}) {
      runtime_->load_adapter(role, agents::testing::role_adapter_path("all_linear", role));
    }
    server_->attach(runtime_, kBase);
  }
  // A response's last bytes reach the client just before the server lets go of its slot.
  ~TestServer() { server_->shutdown(std::chrono::seconds(2)); }

  static ServerOptions default_options() {
    ServerOptions o;
    o.metrics = true;
    return o;
  }

  int port() const { return port_; }
  agents::Runtime& runtime() { return *runtime_; }
  OpenAiServer& server() { return *server_; }

  httplib::Client client(const std::string& api_key = "") const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120, 0);
    if (!api_key.empty()) c.set_bearer_token_auth(api_key.c_str());
    return c;
  }

  Reply post(const std::string& path, const std::string& body, const std::string& api_key = "") const {
    httplib::Client c = client(api_key);
    return to_reply(c.Post(path.c_str(), body, "application/json"));
  }
  Reply post(const std::string& path, const json& body, const std::string& api_key = "") const {
    return post(path, body.dump(), api_key);
  }
  Reply get(const std::string& path, const std::string& api_key = "") const {
    httplib::Client c = client(api_key);
    return to_reply(c.Get(path.c_str()));
  }

  // The data lines of a streamed response, in order ("[DONE]" included), with its status.
  static std::vector<std::string> events(const Reply& reply) {
    std::vector<std::string> out;
    size_t at = 0;
    while ((at = reply.text.find("data: ", at)) != std::string::npos) {
      const size_t end = reply.text.find("\n\n", at);
      out.push_back(reply.text.substr(at + 6, end - at - 6));
      at = end;
    }
    return out;
  }

 private:
  static Reply to_reply(const httplib::Result& r) {
    Reply out;
    if (!r) return out;
    out.status = r->status;
    out.text = r->body;
    out.headers = r->headers;
    out.body = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    if (out.body.is_discarded()) out.body = nullptr;
    return out;
  }

  std::unique_ptr<OpenAiServer> server_;
  std::shared_ptr<agents::Runtime> runtime_;
  int port_ = 0;
};

// A short chat request: greedy, so every run gives the same text.
inline json chat_request(const std::string& model, const std::string& question, int64_t max_tokens = 12) {
  return {{"model", model},
          {"messages", json::array({{{"role", "system"}, {"content", agents::testing::kSystem}},
                                    {{"role", "user"}, {"content", question}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

}  // namespace lorakv::server::testing

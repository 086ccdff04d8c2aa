// `lorakv serve --config`: the session schema's model, adapters and cache, the `server`
// group with its defaults, and refusals at file:line:col naming the key.
#include <gtest/gtest.h>

#include "lorakv/server/config/server_config.h"
#include "tests/support/test_settings.h"

namespace lorakv::server::config {
namespace {

std::string model_yaml() {
  return "model: {path: " + lorakv::testing::test_setting("LORAKV_MODEL") + "}\n";
}

ServerConfig load(const std::string& text) { return load_server_config_from_string(text, "serve.yaml", ""); }

TEST(ServerConfig, DefaultsWithoutAServerGroup) {
  const ServerConfig c = load(model_yaml());
  const ServerSettings defaults;
  EXPECT_EQ(c.server.host, "127.0.0.1");
  EXPECT_EQ(c.server.port, defaults.port);
  EXPECT_EQ(c.server.limits.max_tokens, defaults.limits.max_tokens);
  EXPECT_FALSE(c.server.metrics);
  EXPECT_EQ(c.runtime.cache.mode, "full");
}

TEST(ServerConfig, EveryServerKeyIsRead) {
  const ServerConfig c = load(model_yaml() +
                              "cache: {mode: base_shared, writer: base}\n"
                              "server:\n  host: 0.0.0.0\n  port: 9001\n  api_key: k\n  model_name: smol\n  metrics: true\n"
                              "  max_body_bytes: 1MiB\n  max_prompt_tokens: 4000\n  max_tokens: 512\n  max_n: 4\n"
                              "  max_running_requests: 8\n  max_waiting_requests: 32\n  max_queue_wait_s: 5\n"
                              "  request_timeout_s: 30\n  shutdown_grace_s: 2\n");
  EXPECT_EQ(c.runtime.cache.mode, "base_shared");
  EXPECT_EQ(c.runtime.cache.writer, "base");
  EXPECT_EQ(c.server.host, "0.0.0.0");
  EXPECT_EQ(c.server.port, 9001);
  EXPECT_EQ(c.server.api_key, "k");
  EXPECT_EQ(c.server.model_name, "smol");
  EXPECT_TRUE(c.server.metrics);
  EXPECT_EQ(c.server.limits.max_body_bytes, 1 << 20);
  EXPECT_EQ(c.server.limits.max_prompt_tokens, 4000);
  EXPECT_EQ(c.server.limits.max_tokens, 512);
  EXPECT_EQ(c.server.limits.max_n, 4);
  EXPECT_EQ(c.server.limits.max_running_requests, 8);
  EXPECT_EQ(c.server.limits.max_waiting_requests, 32);
  EXPECT_EQ(c.server.limits.max_queue_wait.count(), 5);
  EXPECT_EQ(c.server.limits.request_timeout.count(), 30);
  EXPECT_EQ(c.server.shutdown_grace.count(), 2);
}

// The refusal's text, or "" when the file loads.
std::string refusal(const std::string& text) {
  try {
    (void)load(text);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(ServerConfig, RefusalsNameTheKeyAndItsPlace) {
  EXPECT_NE(refusal(model_yaml() + "server:\n  prot: 80\n").find("serve.yaml:3"), std::string::npos);
  EXPECT_NE(refusal(model_yaml() + "server:\n  prot: 80\n").find("port"), std::string::npos) << "the near key";
  EXPECT_NE(refusal(model_yaml() + "server:\n  port: 70000\n").find("server.port"), std::string::npos);
  EXPECT_NE(refusal(model_yaml() + "server:\n  max_tokens: 0\n").find("server.max_tokens"), std::string::npos);
  EXPECT_NE(refusal(model_yaml() + "server:\n  metrics: maybe\n").find("server.metrics"), std::string::npos);
  EXPECT_NE(refusal(model_yaml() + "agents: {}\n").find("agents"), std::string::npos) << "a session key is not a server key";
  EXPECT_NE(refusal("server: {port: 1}\n").find("model"), std::string::npos) << "the model is required";
  EXPECT_NE(refusal(model_yaml() + "server: [1, 2]\n").find("server"), std::string::npos);
}

}  // namespace
}  // namespace lorakv::server::config

namespace lorakv::server::config {
namespace {

// The example in configs/serve/ loads, with its paths resolved against its folder.
TEST(ServerConfig, TheExampleConfigLoads) {
  const ServerConfig c = load_server_config(lorakv::testing::test_setting("LORAKV_SOURCE_DIR") +
                                            "/configs/serve/openai_server.yaml");
  EXPECT_EQ(c.runtime.adapters.size(), 3u);
  EXPECT_EQ(c.runtime.cache.writer, "base");
  EXPECT_EQ(c.server.model_name, "smollm2");
  EXPECT_NE(c.runtime.model.path.find("/models/SmolLM2-135M-Instruct.Q4_1.gguf"), std::string::npos);
}

}  // namespace
}  // namespace lorakv::server::config

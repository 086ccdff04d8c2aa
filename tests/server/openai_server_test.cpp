// The server's routes on the real model: /v1/models, /health, chat and text completions
// against the request handle they stand on, streaming in OpenAI's chunk format, stop
// strings, log-probabilities, n, usage and cached tokens, /metrics.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/server/server_test_util.h"

namespace lorakv::server::testing {
namespace {

class OpenAiServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = std::make_unique<TestServer>(); }
  static void TearDownTestSuite() { server_.reset(); }
  static TestServer& server() { return *server_; }

  // The same request through the sessions API's request handle: the reference.
  static agents::RequestResult direct(const std::string& adapter, const std::string& question, int64_t max_tokens) {
    agents::RequestOptions o;
    o.adapter = adapter;
    o.messages = {{"system", agents::testing::kSystem}, {"user", question}};
    o.max_tokens = max_tokens;
    o.logprobs = true;
    o.top_logprobs = 2;
    return server().runtime().submit(o)->wait();
  }

 private:
  static inline std::unique_ptr<TestServer> server_;
};

TEST_F(OpenAiServerTest, ModelsListTheBaseAndEachAdapterWithItsParent) {
  const Reply r = server().get("/v1/models");
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["object"], "list");
  std::map<std::string, json> by_id;
  for (const json& m : r.body["data"]) by_id[m["id"]] = m;
  ASSERT_EQ(by_id.size(), 3u) << r.text;
  EXPECT_TRUE(by_id[kBase]["parent"].is_null());
  EXPECT_EQ(by_id["planner"]["parent"], kBase);
  EXPECT_EQ(by_id["actor"]["parent"], kBase);
  EXPECT_EQ(by_id["actor"]["object"], "model");
}

TEST_F(OpenAiServerTest, ChatCompletionEqualsTheRequestHandle) {
  for (const std::string& model : std::vector<std::string>{"planner", kBase}) {
    const Reply r = server().post("/v1/chat/completions", chat_request(model, agents::testing::kQuestion));
    ASSERT_EQ(r.status, 200) << r.text;
    const agents::RequestResult ref = direct(model == kBase ? "" : model, agents::testing::kQuestion, 12);
    EXPECT_EQ(r.body["object"], "chat.completion");
    EXPECT_EQ(r.body["model"], model);
    ASSERT_EQ(r.body["choices"].size(), 1u);
    const json& choice = r.body["choices"][0];
    EXPECT_EQ(choice["message"]["role"], "assistant");
    EXPECT_EQ(choice["message"]["content"], ref.choices[0].text) << model;
    EXPECT_EQ(choice["finish_reason"], ref.choices[0].end == agents::ReplyEnd::kLength ? "length" : "stop");
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], ref.usage.prompt_tokens);
    EXPECT_EQ(r.body["usage"]["completion_tokens"], ref.usage.completion_tokens);
    EXPECT_EQ(r.body["usage"]["total_tokens"], ref.usage.prompt_tokens + ref.usage.completion_tokens);
  }
}

TEST_F(OpenAiServerTest, TextCompletionContinuesTheRawPrompt) {
  const json request = {{"model", "actor"}, {"prompt", "The capital of France is"}, {"max_tokens", 6}, {"temperature", 0}};
  const Reply r = server().post("/v1/completions", request);
  ASSERT_EQ(r.status, 200) << r.text;
  agents::RequestOptions o;
  o.adapter = "actor";
  o.prompt = "The capital of France is";
  o.max_tokens = 6;
  const agents::RequestResult ref = server().runtime().submit(o)->wait();
  EXPECT_EQ(r.body["object"], "text_completion");
  EXPECT_EQ(r.body["choices"][0]["text"], ref.choices[0].text);
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], ref.usage.prompt_tokens);
  // No max_tokens: OpenAI's default of 16 for a text completion.
  json no_limit = request;
  no_limit.erase("max_tokens");
  no_limit["ignore_eos"] = true;
  EXPECT_EQ(server().post("/v1/completions", no_limit).body["usage"]["completion_tokens"], 16);
}

TEST_F(OpenAiServerTest, StreamedChunksFollowOpenAisFormat) {
  json request = chat_request("planner", agents::testing::kQuestion, 10);
  const Reply whole = server().post("/v1/chat/completions", request);
  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  const Reply r = server().post("/v1/chat/completions", request);
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.headers.find("Content-Type")->second.rfind("text/event-stream", 0), 0u);
  const std::vector<std::string> events = TestServer::events(r);
  ASSERT_GE(events.size(), 4u) << r.text;
  EXPECT_EQ(events.back(), "[DONE]");
  const json role = json::parse(events.front());
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  json finish, usage;
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["id"], role["id"]);
    if (chunk.contains("usage") && !chunk["usage"].is_null()) {
      usage = chunk;
      continue;
    }
    const json& c = chunk["choices"][0];
    if (!c["finish_reason"].is_null()) finish = c;
    if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, whole.body["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish["finish_reason"], whole.body["choices"][0]["finish_reason"]);
  ASSERT_FALSE(usage.is_null()) << "include_usage: a usage chunk";
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], whole.body["usage"]["completion_tokens"]);
  EXPECT_EQ(json::parse(events[events.size() - 2]), usage) << "the usage chunk comes last, before [DONE]";
}

TEST_F(OpenAiServerTest, AStopStringIsNeverStreamedInPart) {
  const Reply whole = server().post("/v1/chat/completions", chat_request("planner", agents::testing::kQuestion, 24));
  const std::string full = whole.body["choices"][0]["message"]["content"];
  ASSERT_GT(full.size(), 8u) << full;
  const std::string stop = full.substr(full.size() / 2, 3);  // spans token pieces at some point
  json request = chat_request("planner", agents::testing::kQuestion, 24);
  request["stop"] = json::array({stop});
  request["stream"] = true;
  const Reply r = server().post("/v1/chat/completions", request);
  std::string text;
  for (const std::string& e : TestServer::events(r)) {
    if (e == "[DONE]") continue;
    const json c = json::parse(e)["choices"][0];
    if (c.contains("delta") && c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) {
      EXPECT_EQ(c["finish_reason"], "stop");
    }
  }
  EXPECT_EQ(text, full.substr(0, full.find(stop)));
}

TEST_F(OpenAiServerTest, LogprobsAreFiniteAndMatchTheHandle) {
  json request = chat_request("actor", agents::testing::kQuestion, 6);
  request["logprobs"] = true;
  request["top_logprobs"] = 3;
  const Reply r = server().post("/v1/chat/completions", request);
  ASSERT_EQ(r.status, 200) << r.text;
  const agents::RequestResult ref = direct("actor", agents::testing::kQuestion, 6);
  const json& content = r.body["choices"][0]["logprobs"]["content"];
  ASSERT_FALSE(content.empty());
  for (size_t i = 0; i < content.size(); ++i) {
    EXPECT_TRUE(std::isfinite(content[i]["logprob"].get<double>()));
    // float32 logits (|x| < 30) summed in other batch shapes, the reference reading cached
    // rows: a few ulps of 30 apart, far below 1e-4.
    EXPECT_NEAR(content[i]["logprob"].get<double>(), ref.choices[0].logprobs[i], 1e-4);
    EXPECT_EQ(content[i]["top_logprobs"].size(), 3u);
    EXPECT_GE(content[i]["top_logprobs"][0]["logprob"].get<double>(), content[i]["logprob"].get<double>());
  }
  // Text completions: logprobs is an integer, the alternatives a map.
  const Reply t = server().post("/v1/completions", {{"model", "actor"}, {"prompt", "One, two,"}, {"max_tokens", 3},
                                                      {"temperature", 0}, {"logprobs", 2}});
  ASSERT_EQ(t.status, 200) << t.text;
  const json& lp = t.body["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), lp["token_logprobs"].size());
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
}

TEST_F(OpenAiServerTest, NRepliesEachWithItsIndex) {
  json request = chat_request("planner", agents::testing::kQuestion, 8);
  request["n"] = 3;
  request["temperature"] = 0.9;
  request["seed"] = 7;
  const Reply r = server().post("/v1/chat/completions", request);
  ASSERT_EQ(r.status, 200) << r.text;
  ASSERT_EQ(r.body["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r.body["choices"][i]["index"], i);
  EXPECT_EQ(server().post("/v1/chat/completions", request).body["choices"], r.body["choices"]) << "the seed repeats";
}

TEST_F(OpenAiServerTest, ARepeatedPromptReusesItsRows) {
  const json request = chat_request("actor", "In which year was Quegou founded?", 4);
  const Reply first = server().post("/v1/chat/completions", request);
  const Reply second = server().post("/v1/chat/completions", request);
  ASSERT_EQ(second.status, 200) << second.text;
  const int64_t prompt = second.body["usage"]["prompt_tokens"];
  const int64_t cached = second.body["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached, prompt / 2) << second.text;
  EXPECT_LE(cached, prompt);
  EXPECT_EQ(first.body["choices"], second.body["choices"]);
}

TEST_F(OpenAiServerTest, HealthAndMetrics) {
  EXPECT_EQ(server().get("/health").status, 200);
  (void)server().post("/v1/chat/completions", chat_request("planner", agents::testing::kQuestion, 2));
  const Reply m = server().get("/metrics");
  ASSERT_EQ(m.status, 200);
  for (const char* name : {"lorakv_requests_running ", "lorakv_requests_total{outcome=\"ok\"}",
                           "lorakv_prompt_tokens_total", "lorakv_cached_prompt_tokens_total",
                           "lorakv_generation_tokens_total", "lorakv_kv_bytes{component=\"base\"}",
                           "lorakv_kv_bytes{component=\"residual\"}", "lorakv_engine_step_seconds_total",
                           "# TYPE lorakv_requests_total counter"}) {
    EXPECT_NE(m.text.find(name), std::string::npos) << name << "\n" << m.text;
  }
}

TEST(OpenAiServerLifecycle, HealthIs503UntilTheModelIsAttached) {
  ServerOptions o;
  o.port = 0;
  OpenAiServer server(o);
  const int port = server.start();
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("loading"), std::string::npos);
  auto chat = c.Post("/v1/chat/completions", chat_request("x", "hi").dump(), "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 503);
  EXPECT_EQ(chat->get_header_value("Retry-After"), "1");
  auto runtime = std::make_shared<agents::Runtime>(agents::testing::real_model_options());
  server.attach(runtime, kBase);
  EXPECT_EQ(c.Get("/health")->status, 200);
  server.shutdown(std::chrono::milliseconds(0));
  EXPECT_FALSE(server.running());
}

}  // namespace
}  // namespace lorakv::server::testing

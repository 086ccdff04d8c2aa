// Eight clients at once on loopback: every response complete and equal to the same request
// run alone, under the near-tie rule (tests/agents/session_test_util.h: batched steps are
// not bit-invariant to what else is in the batch).
#include <gtest/gtest.h>

#include <future>

#include "tests/server/server_test_util.h"

namespace lorakv::server::testing {
namespace {

json request_of(int i) {
  const char* questions[] = {"How old was Dok Gramein in 1940?", "In which year was Quegou founded?",
                             "Who is the mayor of the city where Thou Futrel lives?", "What is 17 times 3?"};
  const char* models[] = {"planner", "actor", kBase};
  json r = chat_request(models[i % 3], questions[i % 4], 10 + i);
  r["logprobs"] = true;
  r["top_logprobs"] = 2;
  r["stream"] = i % 2 == 1;
  return r;
}

// The tokens and, per token, its margin over the best other candidate, of one response.
struct Tokens {
  std::vector<std::string> pieces;
  std::vector<double> margins;
  std::string text;
};

Tokens tokens_of(const Reply& r, bool streamed) {
  Tokens t;
  auto take = [&t](const json& content) {
    for (const json& e : content) {
      t.pieces.push_back(e["token"]);
      double best_other = -1e30;
      for (const json& alt : e["top_logprobs"]) {
        if (alt["token"] != e["token"]) best_other = std::max(best_other, alt["logprob"].get<double>());
      }
      t.margins.push_back(e["logprob"].get<double>() - best_other);
    }
  };
  if (!streamed) {
    take(r.body["choices"][0]["logprobs"]["content"]);
    t.text = r.body["choices"][0]["message"]["content"];
    return t;
  }
  for (const std::string& e : TestServer::events(r)) {
    if (e == "[DONE]") continue;
    const json c = json::parse(e)["choices"][0];
    if (c.contains("logprobs") && !c["logprobs"].is_null()) take(c["logprobs"]["content"]);
    if (c["delta"].contains("content")) t.text += c["delta"]["content"].get<std::string>();
  }
  return t;
}

TEST(ServerConcurrency, EightClientsGetWhatEachGetsAlone) {
  TestServer s;
  constexpr int kClients = 8;
  std::vector<Tokens> alone;
  for (int i = 0; i < kClients; ++i) {
    const Reply r = s.post("/v1/chat/completions", request_of(i));
    ASSERT_EQ(r.status, 200) << r.text;
    alone.push_back(tokens_of(r, request_of(i)["stream"]));
  }
  std::vector<std::future<Reply>> futures;
  for (int i = 0; i < kClients; ++i) {
    futures.push_back(std::async(std::launch::async, [&s, i] { return s.post("/v1/chat/completions", request_of(i)); }));
  }
  for (int i = 0; i < kClients; ++i) {
    const Reply r = futures[static_cast<size_t>(i)].get();
    ASSERT_EQ(r.status, 200) << r.text;
    if (request_of(i)["stream"]) {
      EXPECT_EQ(TestServer::events(r).back(), "[DONE]") << "complete";
    }
    const Tokens together = tokens_of(r, request_of(i)["stream"]);
    const Tokens& ref = alone[static_cast<size_t>(i)];
    size_t d = 0;
    while (d < ref.pieces.size() && d < together.pieces.size() && ref.pieces[d] == together.pieces[d]) ++d;
    if (d == ref.pieces.size() && d == together.pieces.size()) {
      EXPECT_EQ(together.text, ref.text) << i;
      continue;
    }
    ASSERT_LT(d, ref.margins.size()) << "client " << i << ": one reply is a prefix of the other";
    EXPECT_LT(ref.margins[d], agents::testing::kBatchMargin)
        << "client " << i << " differs at token " << d << ": " << ref.text << " | " << together.text;
  }
  EXPECT_EQ(s.runtime().stats().open_requests, 0);
}

}  // namespace
}  // namespace lorakv::server::testing

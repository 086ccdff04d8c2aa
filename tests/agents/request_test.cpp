// tests/agents/request_test.cpp: request handles (agents/request.h) on the real model and
// the role adapters: a handle's events and result against Session::generate on the same
// trajectory, cached tokens on a repeated prompt, n replies by forking with seed + i, cancel
// of one request, a reader that does not drain (its request pauses, then stalls; the
// engine does not), refusals through accepted(), a completion prompt against
// runtime::generate, and a handle that outlives its runtime.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lorakv/agents/errors.h"
#include "lorakv/agents/runtime_core.h"
#include "lorakv/runtime/generator.h"
#include "lorakv/runtime/loaded_model.h"
#include "tests/agents/session_test_util.h"

namespace lorakv::agents {
namespace {

using namespace std::chrono_literals;

class Requests : public testing::RoleRuntimeSuite<Requests> {
 protected:
  static RequestOptions planner_request(const std::string& question = testing::kQuestion) {
    RequestOptions r;
    r.adapter = "planner";
    r.role = "planner";
    r.messages = {{"system", testing::kSystem}, {"user", question}};
    r.max_tokens = 12;
    r.logprobs = true;
    return r;
  }

  // Every event until kDone: the text streamed per reply, the token events' ids, the ends.
  struct Drained {
    std::vector<std::string> text;
    std::vector<std::vector<int32_t>> tokens;
    std::vector<ReplyEnd> ends;
    std::vector<RequestEvent::Kind> order;  // kinds in arrival order
  };
  static Drained drain(RequestHandle& h, size_t replies) {
    Drained d;
    d.text.resize(replies);
    d.tokens.resize(replies);
    d.ends.resize(replies, ReplyEnd::kEndOfTurn);
    while (std::optional<RequestEvent> e = h.next()) {
      d.order.push_back(e->kind);
      const auto c = static_cast<size_t>(e->choice);
      if (e->kind == RequestEvent::Kind::kToken) {
        d.text[c] += e->token.text;
        d.tokens[c].push_back(e->token.token);
      } else if (e->kind == RequestEvent::Kind::kChoiceEnd) {
        d.ends[c] = e->end;
      }
    }
    return d;
  }
};

TEST_F(Requests, AHandleStreamsWhatSessionGenerateReturns) {
  RequestOptions request = planner_request();
  std::atomic<int> completions{0};
  std::optional<RequestResult> completed;
  request.on_complete = [&](const RequestResult& r) {  // on the engine thread, before kDone is taken
    ++completions;
    completed = r;
  };
  std::shared_ptr<RequestHandle> h = rt().submit(request);
  h->accepted();
  const Drained d = drain(*h, 1);
  const RequestResult result = *h->result();
  ASSERT_EQ(result.choices.size(), 1u);
  const Choice& c = result.choices[0];

  std::shared_ptr<Session> s = rt().open_session();
  s->add_agent({"planner", "planner"});
  s->append("system", testing::kSystem);
  s->append("user", testing::kQuestion);
  const auto trajectory = static_cast<int64_t>(s->tokens().size());
  GenerateOptions go;
  static_cast<runtime::ReplyRules&>(go) = request;
  const Reply reply = s->generate("planner", go);

  Reply as_reply;
  as_reply.agent = "planner (request)";
  as_reply.tokens = c.tokens;
  as_reply.logprobs = c.logprobs;
  EXPECT_TRUE(testing::same_reply(reply, as_reply));
  EXPECT_EQ(d.tokens[0], c.tokens);
  EXPECT_EQ(d.text[0], c.text);
  EXPECT_EQ(c.text, reply.text);
  EXPECT_EQ(d.ends[0], reply.end);
  EXPECT_EQ(c.end, reply.end);
  EXPECT_EQ(c.logprobs.size(), c.tokens.size());
  ASSERT_GE(d.order.size(), 2u);
  EXPECT_EQ(d.order[d.order.size() - 2], RequestEvent::Kind::kChoiceEnd);
  EXPECT_EQ(d.order.back(), RequestEvent::Kind::kDone);
  // Usage: the trajectory plus the reply's header.
  std::shared_ptr<Session> header = rt().open_session();
  header->append_text("<|im_start|>planner\n");
  EXPECT_EQ(result.usage.prompt_tokens, trajectory + static_cast<int64_t>(header->tokens().size()));
  EXPECT_EQ(result.usage.completion_tokens, static_cast<int64_t>(c.tokens.size()));
  EXPECT_GT(result.time_to_first_token_s, 0.0);
  EXPECT_FALSE(h->next(0ms).has_value());  // nothing after kDone
  EXPECT_EQ(completions.load(), 1);
  ASSERT_TRUE(completed.has_value());
  EXPECT_EQ(completed->choices[0].tokens, c.tokens);
  EXPECT_EQ(completed->usage.prompt_tokens, result.usage.prompt_tokens);
}

TEST_F(Requests, ARepeatedPromptReportsTheRowsItDidNotCompute) {
  RequestOptions r = planner_request("How many years passed between the founding of Quegou and 1999?");
  r.max_tokens = 2;
  const RequestResult first = rt().submit(r)->wait();
  const RequestResult again = rt().submit(r)->wait();
  // The first finds at most the system turn's blocks (earlier tests wrote them); the
  // second finds every whole block of the trajectory (16 rows each): all but the partial
  // last block and the header, which the reply runs itself.
  EXPECT_LT(first.usage.cached_tokens, again.usage.cached_tokens);
  EXPECT_GE(again.usage.cached_tokens, again.usage.prompt_tokens - 3 - 16);
  EXPECT_LT(again.usage.cached_tokens, again.usage.prompt_tokens);
  EXPECT_EQ(again.choices[0].tokens, first.choices[0].tokens);
}

TEST_F(Requests, NRepliesAreForksSampledWithSeedPlusTheirIndex) {
  RequestOptions r;  // the base model on an open question: sampling spreads
  r.messages = {{"user", "Write one line of a poem about the sea."}};
  r.max_tokens = 8;
  r.sampling.temperature = 1.0;
  r.sampling.seed = 5;
  r.n = 3;
  std::shared_ptr<RequestHandle> h = rt().submit(r);
  const Drained d = drain(*h, 3);
  const RequestResult all = *h->result();
  ASSERT_EQ(all.choices.size(), 3u);
  int64_t generated = 0;
  for (int64_t i = 0; i < 3; ++i) {
    SCOPED_TRACE("reply " + std::to_string(i));
    RequestOptions one = r;
    one.n = 1;
    one.sampling.seed = 5 + static_cast<uint64_t>(i);
    const RequestResult alone = rt().submit(one)->wait();
    EXPECT_EQ(all.choices[static_cast<size_t>(i)].tokens, alone.choices[0].tokens);
    EXPECT_EQ(d.tokens[static_cast<size_t>(i)], alone.choices[0].tokens);
    generated += static_cast<int64_t>(alone.choices[0].tokens.size());
  }
  EXPECT_EQ(all.usage.completion_tokens, generated);
  EXPECT_NE(all.choices[0].tokens, all.choices[1].tokens);  // different seeds, sampled
}

TEST_F(Requests, CancelEndsOnlyThatRequest) {
  RequestOptions r = planner_request();
  r.max_tokens = 48;
  r.ignore_end_tokens = true;
  std::shared_ptr<RequestHandle> a = rt().submit(r);
  std::shared_ptr<RequestHandle> b = rt().submit(r);
  ASSERT_TRUE(a->next().has_value());  // a has started generating
  a->cancel();
  a->cancel();  // twice: harmless
  const RequestResult ra = a->wait();
  const RequestResult rb = b->wait();
  EXPECT_EQ(ra.choices[0].end, ReplyEnd::kCancelled);
  EXPECT_LT(ra.choices[0].tokens.size(), 48u);
  EXPECT_EQ(rb.choices[0].end, ReplyEnd::kLength);
  EXPECT_EQ(rb.choices[0].tokens.size(), 48u);
  a->cancel();  // after its end: a no-op
}

TEST_F(Requests, AReaderThatDoesNotDrainPausesItsOwnRequestThenStalls) {
  RequestOptions slow = planner_request();
  slow.max_tokens = 64;
  slow.ignore_end_tokens = true;
  slow.max_pending_events = 3;
  slow.stall_timeout = 4000ms;  // far beyond the other request's time, even on a loaded machine
  std::shared_ptr<RequestHandle> unread = rt().submit(slow);
  unread->accepted();
  // Another request runs to its end meanwhile: the engine thread is not held up.
  RequestOptions other = planner_request();
  other.max_tokens = 8;
  other.ignore_end_tokens = true;
  const RequestResult done = rt().submit(other)->wait();
  EXPECT_EQ(done.choices[0].tokens.size(), 8u);
  EXPECT_FALSE(unread->result().has_value()) << "the unread request ended before its stall timeout";
  std::this_thread::sleep_for(5000ms);  // past the stall timeout
  const Drained d = drain(*unread, 1);
  EXPECT_EQ(d.ends[0], ReplyEnd::kStalled);
  // It paused with its queue full: at most the queue's worth of tokens was generated.
  EXPECT_LE(d.tokens[0].size(), 3u);
  EXPECT_GE(d.tokens[0].size(), 1u);
  // A reader that keeps up is never paused for long: the same request drained at once ends.
  slow.max_tokens = 16;
  const RequestResult kept_up = rt().submit(slow)->wait();
  EXPECT_EQ(kept_up.choices[0].end, ReplyEnd::kLength);
}

TEST_F(Requests, RefusalsComeFromSubmitOrThroughAccepted) {
  RequestOptions unknown = planner_request();
  unknown.adapter = "no-such-adapter";
  std::shared_ptr<RequestHandle> h = rt().submit(unknown);
  try {
    h->accepted();
    ADD_FAILURE() << "an unknown adapter was accepted";
  } catch (const UnknownAdapterError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnknownAdapter);
  }
  EXPECT_THROW(h->wait(), UnknownAdapterError);
  // Checked on the caller's thread, before anything is posted.
  RequestOptions bad = planner_request();
  bad.n = 0;
  EXPECT_THROW(rt().submit(bad), ConfigError);
  bad = planner_request();
  bad.prompt = "both";
  EXPECT_THROW(rt().submit(bad), ConfigError);
  bad = planner_request();
  bad.top_logprobs = 21;
  EXPECT_THROW(rt().submit(bad), ConfigError);
  bad = planner_request();
  bad.sampling.logit_bias[1 << 20] = 1.0;
  EXPECT_THROW(rt().submit(bad), ConfigError);
  // Too long for the model's context: refused through accepted(), nothing left running.
  RequestOptions long_one = planner_request(std::string(40000, 'x'));
  std::shared_ptr<RequestHandle> too_long = rt().submit(long_one);
  EXPECT_THROW(too_long->accepted(), Error);
  EXPECT_EQ(rt().stats().sessions, 0);
}

TEST_F(Requests, ACompletionPromptContinuesTheTextAsGenerateDoes) {
  RequestOptions r;
  r.prompt = "The capital of France is";
  r.max_tokens = 6;
  r.ignore_end_tokens = true;
  const RequestResult got = rt().submit(r)->wait();
  const runtime::LoadedModel loaded = runtime::load_model(lorakv::testing::test_setting("LORAKV_MODEL"));
  runtime::GenerationRequest ref;
  ref.prompt = loaded.tokenizer->encode(*r.prompt, /*parse_special=*/false);
  ref.max_tokens = 6;
  const runtime::GenerationOutput want = runtime::generate(*loaded.model, loaded.tokenizer.get(), {ref})[0];
  EXPECT_EQ(got.choices[0].tokens, want.tokens);
  EXPECT_EQ(got.choices[0].text, want.text);
  EXPECT_EQ(got.usage.prompt_tokens, static_cast<int64_t>(ref.prompt.size()));
}

// What a caller sees of any failure is a lorakv::Error with a code: the engine's capacity
// error as the sessions' own, anything else (libtorch's errors, bad_alloc) as internal.
TEST(RequestErrors, EveryFailureReachesTheCallerAsALorakvError) {
  auto code_of = [](std::exception_ptr e) {
    try {
      std::rethrow_exception(as_session_error(e));
    } catch (const Error& error) {
      return std::string(error_code_name(error.code()));
    } catch (...) {
      return std::string("(not a lorakv::Error)");
    }
  };
  EXPECT_EQ(code_of(std::make_exception_ptr(runtime::CapacityError("full"))), "capacity_exceeded");
  EXPECT_THROW(std::rethrow_exception(as_session_error(std::make_exception_ptr(runtime::CapacityError("full")))),
               SessionCapacityError);
  EXPECT_EQ(code_of(std::make_exception_ptr(std::runtime_error("c10 said no"))), "internal_error");
  EXPECT_EQ(code_of(std::make_exception_ptr(std::bad_alloc())), "internal_error");
  EXPECT_EQ(code_of(std::make_exception_ptr(42)), "internal_error");
  EXPECT_EQ(code_of(std::make_exception_ptr(UnknownAdapterError("x"))), "unknown_adapter");
}

TEST(RequestLifetime, AHandleOutlivesItsRuntime) {
  std::shared_ptr<RequestHandle> h;
  {
    Runtime rt(testing::real_model_options());
    RequestOptions r;
    r.messages = {{"user", "Count to a hundred."}};
    r.max_tokens = 200;
    r.ignore_end_tokens = true;
    h = rt.submit(r);
    ASSERT_TRUE(h->next().has_value());
  }  // the runtime ends the request
  const RequestResult result = h->wait();
  EXPECT_EQ(result.choices[0].end, ReplyEnd::kCancelled);
  EXPECT_LT(result.choices[0].tokens.size(), 200u);
  h->cancel();  // the runtime is gone: a no-op
}

}  // namespace
}  // namespace lorakv::agents

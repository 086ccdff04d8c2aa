// tests/agents/session_concurrency_test.cpp: 16 sessions driven from 4 threads at once, with
// different adapters, modes, writers and lengths, agents joining and leaving, and cancelled
// replies among them; every reply equals the one the same session gives when it runs alone
// on the same runtime, under the near-tie rule (tests/agents/session_test_util.h: batched
// steps are not bit-invariant to what else is in the batch).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tests/agents/session_test_util.h"

namespace lorakv::agents {
namespace {

using runtime::SharedWriter;
using runtime::SharingMode;

struct Script {
  SessionOptions options;
  std::string set;  // adapter name prefix: "" (all-linear) or "shared." (shared A)
  std::string question;
  bool reflector_joins = false;  // before the third turn
  bool actor_leaves = false;     // after the third turn
  bool cancelled_reply = false;  // a planner reply beside the actor's, past its deadline at once
};

std::vector<Script> scripts() {
  const SharingMode modes[] = {SharingMode::kFull, SharingMode::kFullShared, SharingMode::kBaseShared,
                               SharingMode::kBaseLrShared};
  const char* questions[] = {"How old was Dok Gramein in 1940?", "Who is the mayor of the city where Thou Futrel lives?",
                             "In which year was Quegou founded?",
                             "How many years passed between the founding of Gramfal and the birth of Dok Gramein?"};
  std::vector<Script> out;
  for (int i = 0; i < 16; ++i) {
    Script s;
    s.options.mode = modes[i % 4];
    s.options.writer = (i / 4) % 2 == 1 ? SharedWriter::kBase : SharedWriter::kFirst;
    s.set = s.options.mode == SharingMode::kBaseLrShared || i % 3 == 0 ? "shared." : "";
    s.question = questions[(i / 2) % 4];
    s.reflector_joins = i % 5 == 1;
    s.actor_leaves = i % 7 == 3;
    s.cancelled_reply = i % 4 == 2;
    out.push_back(s);
  }
  return out;
}

GenerateOptions turn_options() {
  GenerateOptions o;
  o.max_tokens = 12;
  o.logprobs = true;
  return o;
}

// One session's life, in steps a caller thread can interleave with other sessions':
// open and ask; three turns; the joins, leaves and cancels of its script in between.
class ScriptRun {
 public:
  ScriptRun(Runtime& rt, Script script) : script_(std::move(script)) {
    session_ = rt.open_session(script_.options);
    session_->add_agent({"planner", script_.set + "planner", ""});
    session_->add_agent({"actor", script_.set + "actor", ""});
    session_->append("system", "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].");
    session_->append("user", script_.question);
  }
  static constexpr int kTurns = 3;
  // Starts turn `t`; finish(t) waits for it.
  void start(int t) {
    if (t == 2 && script_.reflector_joins) session_->add_agent({"reflector", script_.set + "reflector", ""});
    const std::string agent = t == 0 ? "planner" : t == 1 ? "actor" : script_.reflector_joins ? "reflector" : "planner";
    pending_ = session_->generate_async(agent, turn_options());
    if (t == 1 && script_.cancelled_reply) {
      GenerateOptions late = turn_options();
      late.max_tokens = 200;
      late.timeout = std::chrono::milliseconds(1);
      cancelled_ = session_->generate_async("planner", late);
    }
  }
  void finish(int t) {
    replies_.push_back(pending_.get());
    if (cancelled_.valid()) {
      const Reply late = cancelled_.get();
      EXPECT_EQ(late.end, ReplyEnd::kDeadline);
      EXPECT_FALSE(late.appended);
    }
    if (t == 2 && script_.actor_leaves) session_->remove_agent("actor");
  }
  const std::vector<Reply>& replies() const { return replies_; }
  std::vector<int32_t> tokens() const { return session_->tokens(); }

 private:
  Script script_;
  std::shared_ptr<Session> session_;
  std::future<Reply> pending_, cancelled_;
  std::vector<Reply> replies_;
};

TEST(SessionConcurrency, SixteenSessionsFromFourThreadsEqualEachRunAlone) {
  auto rt = testing::make_role_runtime();
  const std::vector<Script> all = scripts();
  // Alone: one session at a time.
  std::vector<std::vector<Reply>> alone;
  std::vector<std::vector<int32_t>> alone_tokens;
  for (const Script& s : all) {
    ScriptRun run(*rt, s);
    for (int t = 0; t < ScriptRun::kTurns; ++t) {
      run.start(t);
      run.finish(t);
    }
    alone.push_back(run.replies());
    alone_tokens.push_back(run.tokens());
  }
  // Together: 4 threads, each with 4 sessions whose turns it starts together.
  std::vector<std::unique_ptr<ScriptRun>> runs(all.size());
  std::vector<std::thread> threads;
  for (size_t th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (size_t i = th; i < all.size(); i += 4) runs[i] = std::make_unique<ScriptRun>(*rt, all[i]);
      for (int t = 0; t < ScriptRun::kTurns; ++t) {
        for (size_t i = th; i < all.size(); i += 4) runs[i]->start(t);
        for (size_t i = th; i < all.size(); i += 4) runs[i]->finish(t);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int exact = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE("session " + std::to_string(i) + " (" + runtime::sharing_mode_name(all[i].options.mode) + ")");
    ASSERT_EQ(runs[i]->replies().size(), alone[i].size());
    bool all_exact = true;
    for (size_t t = 0; t < alone[i].size(); ++t) {
      EXPECT_EQ(runs[i]->replies()[t].end == ReplyEnd::kCancelled, alone[i][t].end == ReplyEnd::kCancelled);
      EXPECT_TRUE(testing::same_reply(alone[i][t], runs[i]->replies()[t]));
      all_exact = all_exact && alone[i][t].tokens == runs[i]->replies()[t].tokens;
    }
    if (all_exact) {
      EXPECT_EQ(runs[i]->tokens(), alone_tokens[i]);
      ++exact;
    }
  }
  std::printf("  %d of %zu sessions token for token equal to running alone\n", exact, all.size());
  const RuntimeStats st = rt->stats();
  EXPECT_GT(st.driver.steps, 0);
}

}  // namespace
}  // namespace lorakv::agents

// tests/agents/session_admission_test.cpp: admission on the real model: a pool that holds
// four base_lr_shared sessions' reservations admits only two `full` ones at once and runs
// the others as those close; a waiting call ends by its deadline, by cancel or by close with
// nothing appended; a reservation that cannot fit even alone is refused; a flood of
// unreserved sessions beside a reserved one leaves it undisturbed; waiting is bounded.
#include <gtest/gtest.h>

#include <chrono>
#include <utility>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "lorakv/agents/errors.h"
#include "tests/agents/session_test_util.h"

namespace lorakv::agents {
namespace {

using runtime::SharingMode;
using runtime::SharedWriter;

using testing::kQuestion;
using testing::kSystem;

// Every session reserves 64 trajectory tokens (4 blocks of 16) and 16 reply tokens per agent
// (1 block). With three agents: `full` reserves 3 * 4 + 3 = 15 base blocks per lane,
// base_lr_shared 4 + 3 = 7 (plus one shared-A value stream in its residual pool). A pool of
// 30 blocks holds four base_lr_shared reservations (28) but only two `full` ones (30).
constexpr int64_t kReserveTokens = 64, kReplyTokens = 16, kPoolBlocks = 30, kBlockSize = 16;

int64_t row_bytes() {
  static const int64_t bytes = [] {
    Runtime probe(testing::real_model_options());
    return probe.stats().base_row_bytes;
  }();
  return bytes;
}

std::unique_ptr<Runtime> pool_of_30_blocks() {
  RuntimeOptions o = testing::real_model_options();
  o.kv_pool_bytes = row_bytes() * kPoolBlocks * kBlockSize;
  o.block_size = kBlockSize;
  auto rt = std::make_unique<Runtime>(o);
  for (const char* role : {"planner", "actor", "reflector"}) {
    rt->load_adapter(role, testing::role_adapter_path("qv_shared_a", role));
  }
  return rt;
}

std::shared_ptr<Session> reserved_session(Runtime& rt, SharingMode mode) {
  SessionOptions o{mode, SharedWriter::kFirst};
  o.reserve_tokens = kReserveTokens;
  o.reserve_reply_tokens = kReplyTokens;
  auto s = rt.open_session(o);
  for (const char* role : {"planner", "actor", "reflector"}) s->add_agent({role, role, ""});
  s->append("system", kSystem);
  s->append("user", kQuestion);
  return s;
}

GenerateOptions tokens(int64_t n) {
  GenerateOptions o;
  o.max_tokens = n;
  return o;
}

// Polls the runtime until `ready` holds (the engine thread admits asynchronously).
template <typename Ready>
bool eventually(Runtime& rt, Ready ready) {
  for (int i = 0; i < 400; ++i) {
    if (ready(rt.stats())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Four sessions each generate one turn and close, all submitted at once: every turn is
// appended; base_lr_shared has all four admitted at once, `full` two, the others waiting.
TEST(SessionAdmission, FullAdmitsFewerSessionsThanBaseLrSharedInTheSamePool) {
  for (SharingMode mode : {SharingMode::kBaseLrShared, SharingMode::kFull}) {
    SCOPED_TRACE(runtime::sharing_mode_name(mode));
    auto rt = pool_of_30_blocks();
    std::vector<std::shared_ptr<Session>> sessions;
    for (int i = 0; i < 4; ++i) sessions.push_back(reserved_session(*rt, mode));
    std::vector<std::future<Reply>> replies;
    for (auto& s : sessions) replies.push_back(s->generate_async("planner", tokens(8)));
    if (mode == SharingMode::kFull) {
      EXPECT_TRUE(eventually(*rt, [](const RuntimeStats& st) { return st.waiting_calls == 2; }));
    }
    for (size_t i = 0; i < sessions.size(); ++i) {
      const Reply r = replies[i].get();
      EXPECT_TRUE(r.appended) << "session " << i << ": " << reply_end_name(r.end);
      sessions[i]->close();
    }
    const RuntimeStats st = rt->stats();
    EXPECT_EQ(st.peak_admitted_sessions, mode == SharingMode::kFull ? 2 : 4);
    EXPECT_EQ(st.admitted_sessions, 0);
    EXPECT_EQ(st.waiting_calls, 0);
    EXPECT_EQ(st.kv_bytes_in_use, 0);
  }
}

// A waiting call: its deadline ends it (kDeadline), cancel ends another (kCancelled), and a
// third runs once the admitted session closes. Nothing waiting is appended.
TEST(SessionAdmission, WaitingCallsEndByDeadlineOrCancelOrRunWhenRoomFrees) {
  auto rt = pool_of_30_blocks();
  auto first = reserved_session(*rt, SharingMode::kFull);
  auto second = reserved_session(*rt, SharingMode::kFull);
  auto third = reserved_session(*rt, SharingMode::kFull);
  ASSERT_TRUE(first->generate("planner", tokens(4)).appended);   // admitted: 15 of 30 blocks
  ASSERT_TRUE(second->generate("planner", tokens(4)).appended);  // admitted: 30 of 30
  const std::vector<int32_t> before = third->tokens();

  GenerateOptions late = tokens(4);
  late.timeout = std::chrono::milliseconds(200);
  const Reply timed_out = third->generate("planner", late);
  EXPECT_EQ(timed_out.end, ReplyEnd::kDeadline);
  EXPECT_FALSE(timed_out.appended);

  std::future<Reply> cancelled = third->generate_async("planner", tokens(4));
  ASSERT_TRUE(eventually(*rt, [](const RuntimeStats& st) { return st.waiting_calls == 1; }));
  third->cancel();
  EXPECT_EQ(cancelled.get().end, ReplyEnd::kCancelled);
  EXPECT_EQ(third->tokens(), before);

  std::future<Reply> runs = third->generate_async("planner", tokens(4));
  ASSERT_TRUE(eventually(*rt, [](const RuntimeStats& st) { return st.waiting_calls == 1; }));
  first->close();
  EXPECT_TRUE(runs.get().appended);
  EXPECT_EQ(rt->stats().peak_admitted_sessions, 2);
}

// Closing a session whose call waits ends the call as kCancelled.
TEST(SessionAdmission, ClosingAWaitingSessionCancelsItsCall) {
  auto rt = pool_of_30_blocks();
  auto first = reserved_session(*rt, SharingMode::kFull);
  auto second = reserved_session(*rt, SharingMode::kFull);
  auto third = reserved_session(*rt, SharingMode::kFull);
  ASSERT_TRUE(first->generate("planner", tokens(2)).appended);
  ASSERT_TRUE(second->generate("planner", tokens(2)).appended);
  std::future<Reply> waiting = third->generate_async("planner", tokens(2));
  ASSERT_TRUE(eventually(*rt, [](const RuntimeStats& st) { return st.waiting_calls == 1; }));
  third->close();
  EXPECT_EQ(waiting.get().end, ReplyEnd::kCancelled);
  EXPECT_EQ(rt->stats().waiting_calls, 0);
}

// A reservation larger than the pool, even with no other session, is refused at once with
// the pools' sizes in the message; the session stays usable as it was.
TEST(SessionAdmission, AReservationThatCannotFitEvenAloneIsRefused) {
  auto rt = pool_of_30_blocks();
  SessionOptions o{SharingMode::kFull, SharedWriter::kFirst};
  o.reserve_tokens = 200;  // 13 blocks per agent, three agents: 39 + 3 > 30
  auto s = rt->open_session(o);
  for (const char* role : {"planner", "actor", "reflector"}) s->add_agent({role, role, ""});
  s->append("user", kQuestion);
  const std::vector<int32_t> before = s->tokens();
  try {
    s->generate("planner", tokens(2));
    FAIL() << "no SessionCapacityError";
  } catch (const SessionCapacityError& e) {
    EXPECT_NE(std::string(e.what()).find("reserve_tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("base pool 30 blocks per lane"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s->tokens(), before);
  SessionOptions bad;
  bad.reserve_tokens = -1;
  EXPECT_THROW(rt->open_session(bad), ConfigError);
}

// A flood of sessions without reservations (each: a question with some context, one long
// reply, close) beside a reserved session taking three turns: once admitted, the reserved
// session never finds its rows taken (no step defers its work for rows) and its replies
// equal its replies alone; the flood runs as reservations allow, every call completing.
TEST(SessionAdmission, AFloodOfUnreservedSessionsLeavesAReservedOneUndisturbed) {
  RuntimeOptions o = testing::real_model_options();
  o.kv_pool_bytes = row_bytes() * 48 * kBlockSize;  // 48 blocks
  o.block_size = kBlockSize;
  o.max_admission_wait = std::chrono::milliseconds(0);  // the flood waits as long as it takes (slow under TSan)
  Runtime rt(o);
  rt.load_adapter("planner", testing::role_adapter_path("qv_shared_a", "planner"));
  GenerateOptions turn = tokens(24);
  turn.logprobs = true;
  auto reserved_session = [&rt, &turn](std::vector<Reply>& replies) {
    SessionOptions so{SharingMode::kFull, SharedWriter::kFirst};
    so.reserve_tokens = 256;       // 16 blocks
    so.reserve_reply_tokens = 32;  // 2 blocks
    auto s = rt.open_session(so);
    s->add_agent({"planner", "planner", ""});
    s->append("system", kSystem);
    s->append("user", kQuestion);
    replies.push_back(s->generate("planner", turn));  // admitted from here on
    return s;
  };
  auto later_turns = [&turn](Session& s, std::vector<Reply>& replies) {
    for (int t = 1; t < 3; ++t) {
      s.append("tool", "Dok Gramein: born 1914 in Quegou; founded the Gramfal archive in 1931.");
      replies.push_back(s.generate("planner", turn));
    }
  };
  std::vector<Reply> alone;
  {
    auto s = reserved_session(alone);
    later_turns(*s, alone);
    EXPECT_EQ(s->stats().deferred_for_rows, 0);
  }

  std::vector<Reply> beside;
  auto s = reserved_session(beside);
  std::vector<std::future<Reply>> flood;
  for (int i = 0; i < 16; ++i) {
    flood.push_back(std::async(std::launch::async, [&rt, i] {
      auto f = rt.open_session({SharingMode::kFull, SharedWriter::kFirst});
      f->add_agent({"planner", "planner", ""});
      f->append("system", kSystem);
      f->append("user", std::string(kQuestion) + " Context " + std::to_string(i) +
                            ": Quegou was founded in 1870; Gramfal lies north of Quegou; Thou Futrel lives in Gramfal.");
      GenerateOptions long_reply = tokens(64);
      long_reply.ignore_end_tokens = true;
      const Reply r = f->generate("planner", long_reply);
      f->close();
      return r;
    }));
  }
  EXPECT_TRUE(eventually(rt, [](const RuntimeStats& st) { return st.waiting_calls > 0; })) << "the flood never waited";
  later_turns(*s, beside);
  EXPECT_EQ(s->stats().deferred_for_rows, 0) << "the flood took rows the reserved session had reserved";
  ASSERT_EQ(beside.size(), alone.size());
  for (size_t t = 0; t < alone.size(); ++t) EXPECT_TRUE(testing::same_reply(alone[t], beside[t])) << "turn " << t;
  for (std::future<Reply>& f : flood) EXPECT_TRUE(f.get().appended);
  s->close();
  EXPECT_EQ(rt.stats().kv_bytes_in_use, 0);
}

// Waiting is bounded: past max_waiting_calls a call is refused at once, and one that waits
// past max_admission_wait is refused; both are OverloadedError, and nothing ran.
TEST(SessionAdmission, WaitingIsBoundedInCountAndTime) {
  RuntimeOptions o = testing::real_model_options();
  o.kv_pool_bytes = row_bytes() * kPoolBlocks * kBlockSize;
  o.block_size = kBlockSize;
  o.max_waiting_calls = 1;
  o.max_admission_wait = std::chrono::milliseconds(300);
  auto rt = std::make_unique<Runtime>(o);
  for (const char* role : {"planner", "actor", "reflector"}) {
    rt->load_adapter(role, testing::role_adapter_path("qv_shared_a", role));
  }
  auto first = reserved_session(*rt, SharingMode::kFull);
  auto second = reserved_session(*rt, SharingMode::kFull);
  auto third = reserved_session(*rt, SharingMode::kFull);
  auto fourth = reserved_session(*rt, SharingMode::kFull);
  ASSERT_TRUE(first->generate("planner", tokens(2)).appended);
  ASSERT_TRUE(second->generate("planner", tokens(2)).appended);  // the pool is reserved whole
  std::future<Reply> waits = third->generate_async("planner", tokens(2));
  ASSERT_TRUE(eventually(*rt, [](const RuntimeStats& st) { return st.waiting_calls == 1; }));
  try {
    fourth->generate("planner", tokens(2));
    FAIL() << "a second waiting call was queued";
  } catch (const OverloadedError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOverloaded);
    EXPECT_EQ(e.context().key, "max_waiting_calls");
  }
  try {
    waits.get();
    FAIL() << "the waiting call was not refused after max_admission_wait";
  } catch (const OverloadedError& e) {
    EXPECT_EQ(e.context().key, "max_admission_wait");
  }
  EXPECT_EQ(rt->stats().waiting_calls, 0);
}

}  // namespace
}  // namespace lorakv::agents

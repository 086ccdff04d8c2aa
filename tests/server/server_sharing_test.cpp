// Sharing without sessions: requests reuse rows through the prefix index in the server's
// cache mode. Where rows are keyed by the base model (writer `base`), two adapters on one
// history share them; in `full`, rows are the adapter's own and another adapter never
// reads them.
#include <gtest/gtest.h>

#include "tests/server/server_test_util.h"

namespace lorakv::server::testing {
namespace {

constexpr const char* kHistory = "Who is the mayor of the city where Thou Futrel lives?";

int64_t cached_tokens(const Reply& r) { return r.body["usage"]["prompt_tokens_details"]["cached_tokens"]; }
int64_t prompt_tokens(const Reply& r) { return r.body["usage"]["prompt_tokens"]; }

TEST(ServerSharing, WriterBaseSharesOneHistoryAcrossAdapters) {
  ServerOptions o = TestServer::default_options();
  o.sharing.mode = runtime::SharingMode::kBaseShared;
  o.sharing.writer = runtime::SharedWriter::kBase;
  TestServer s(o);
  const Reply planner = s.post("/v1/chat/completions", chat_request("planner", kHistory, 3));
  ASSERT_EQ(planner.status, 200) << planner.text;
  const agents::RuntimeStats after_planner = s.runtime().stats();
  const Reply actor = s.post("/v1/chat/completions", chat_request("actor", kHistory, 3));
  ASSERT_EQ(actor.status, 200) << actor.text;
  const agents::RuntimeStats after_actor = s.runtime().stats();
  // The history's rows (every block the base model wrote) come from the planner's request.
  EXPECT_GE(cached_tokens(actor), prompt_tokens(actor) - 16) << actor.text;
  // No second copy of the history's rows: the cached bytes grow by at most the block the
  // prompt ends in (a partial block is not in the prefix index, so it is computed again)
  // and the actor's residual rows.
  const int64_t block_bytes = 16 * after_actor.base_row_bytes;
  const int64_t planner_bytes = after_planner.kv_cached_bytes;
  EXPECT_GT(planner_bytes, 2 * block_bytes);
  EXPECT_LE(after_actor.kv_cached_bytes - planner_bytes, block_bytes + after_actor.kv_residual_bytes)
      << planner_bytes << " then " << after_actor.kv_cached_bytes;
}

TEST(ServerSharing, FullModeNeverReadsAnotherAdaptersRows) {
  TestServer s;  // mode full, writer first: rows are keyed by the adapter that wrote them
  const Reply planner = s.post("/v1/chat/completions", chat_request("planner", kHistory, 3));
  ASSERT_EQ(planner.status, 200) << planner.text;
  const Reply actor = s.post("/v1/chat/completions", chat_request("actor", kHistory, 3));
  ASSERT_EQ(actor.status, 200) << actor.text;
  EXPECT_EQ(cached_tokens(actor), 0) << actor.text;
  const Reply again = s.post("/v1/chat/completions", chat_request("actor", kHistory, 3));
  EXPECT_GT(cached_tokens(again), prompt_tokens(again) / 2) << "its own rows are reused";
  EXPECT_EQ(again.body["choices"], actor.body["choices"]);
}

}  // namespace
}  // namespace lorakv::server::testing

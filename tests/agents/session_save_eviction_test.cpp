// tests/agents/session_save_eviction_test.cpp: saving a session with an eviction policy
// (file format version 2, docs/sessions.md): restored, it continues as the original does,
// token for token and log-probability for log-probability, evicting alike; a session
// without a policy is still written as version 1 (no eviction section) and restores with
// none; a rerotating runtime's session (keys before RoPE) is version 4, restores alike and
// only into a rerotating runtime; a damaged eviction section (a missing or invalid key, a version that drops it, a
// missing or corrupt lanes tensor, counts that disagree) is refused naming the file and
// the field. The rows themselves: tests/runtime/engine_save_eviction_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "lorakv/agents/errors.h"
#include "lorakv/agents/session_file.h"
#include "lorakv/common/sha256.h"
#include "lorakv/formats/json.h"
#include "lorakv/formats/safetensors_file.h"
#include "tests/agents/session_save_scenario.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/test_settings.h"

namespace lorakv::agents {
namespace {

using runtime::SharedWriter;
using runtime::SharingMode;

std::string model() { return lorakv::testing::test_setting("LORAKV_MODEL"); }
std::string adapter_set(const char* set) {
  return lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/assets/role_adapters/" + set;
}
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

SessionOptions evicting(SharingMode mode) {
  SessionOptions o{mode, SharedWriter::kFirst};
  o.eviction.policy = "h2o";
  o.eviction.budget_tokens = 48;
  o.eviction.window = 8;
  o.eviction.protected_spans = {{0, 6}};
  return o;
}

// The session header of a saved file, parsed.
formats::JsonValue header_of(const std::string& path) {
  const auto file = formats::SafetensorsFile::open(path);
  return formats::parse_json(file->metadata().at("lorakv.session"));
}

// The next turn of both, alone: the same tokens and log-probabilities bit for bit.
void expect_same_continuation(Session& original, Session& restored) {
  EXPECT_EQ(restored.tokens(), original.tokens());
  const Reply a = testing::scenario_next_turn(original);
  const Reply b = testing::scenario_next_turn(restored);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logprobs, b.logprobs);
  EXPECT_EQ(a.runner_up_logprobs, b.runner_up_logprobs);
}

TEST(SessionSaveEviction, AnEvictingSessionRestoresAndContinuesAlike) {
  for (const auto& [set, mode] :
       {std::pair{"all_linear", SharingMode::kFull}, std::pair{"qv_shared_a", SharingMode::kBaseLrShared}}) {
    SCOPED_TRACE(runtime::sharing_mode_name(mode));
    Runtime rt(testing::scenario_options(model()));
    testing::load_scenario_adapters(rt, adapter_set(set));
    auto original = testing::scenario_session(rt, evicting(mode));
    const std::string path = lorakv::testing::temp_path(std::string("evicting_") + runtime::sharing_mode_name(mode));
    original->save(path);
    EXPECT_EQ(header_of(path).at("version").as_int(), kSessionFormatVersionWithEviction);
    const SessionFile saved = read_session(path);
    EXPECT_EQ(saved.options.eviction.policy, "h2o");
    EXPECT_EQ(saved.options.eviction.budget_tokens, 48);
    EXPECT_EQ(saved.options.eviction.protected_spans, (std::vector<std::pair<int64_t, int64_t>>{{0, 6}}));
    const runtime::SequenceRows& rows = mode == SharingMode::kFull ? *saved.rows.own[0] : *saved.rows.shared;
    ASSERT_FALSE(rows.lanes.empty());
    EXPECT_LT(rows.lanes[0].positions.size(), rows.tokens.size()) << "nothing was evicted: the test would not see it";
    EXPECT_FALSE(rows.lanes[0].scores.empty());
    auto restored = rt.restore_session(path);
    expect_same_continuation(*original, *restored);
    // And once more after both evicted again.
    expect_same_continuation(*original, *restored);
  }
}

// capkv's anchor (every query its rows' writer ran) goes into the file beside the rows; the
// restored session evicts with it as the original does.
TEST(SessionSaveEviction, ACapKvSessionCarriesItsQueryAnchor) {
  Runtime rt(testing::scenario_options(model()));
  testing::load_scenario_adapters(rt, adapter_set("all_linear"));
  SessionOptions o = evicting(SharingMode::kFull);
  o.eviction.policy = "capkv";
  o.eviction.window_growth = 0.25;
  o.eviction.loss_bound = true;
  auto original = testing::scenario_session(rt, o);
  const std::string path = lorakv::testing::temp_path("evicting_capkv");
  original->save(path);
  const SessionFile saved = read_session(path);
  EXPECT_EQ(saved.options.eviction.policy, "capkv");
  EXPECT_EQ(saved.options.eviction.capkv_tau, 5);
  EXPECT_EQ(saved.options.eviction.capkv_future_positions, 512);
  EXPECT_EQ(saved.options.eviction.window_growth, 0.25);
  EXPECT_TRUE(saved.options.eviction.loss_bound);
  const runtime::SequenceRows& rows = *saved.rows.own[0];
  EXPECT_LT(rows.lanes[0].positions.size(), rows.tokens.size()) << "nothing was evicted: the test would not see it";
  ASSERT_TRUE(rows.query_sum.defined());
  EXPECT_EQ(rows.query_sum.dim(), 3);
  EXPECT_GT(rows.query_count, 0);
  EXPECT_GT(rows.query_sum.abs().sum().item<double>(), 0);
  auto restored = rt.restore_session(path);
  expect_same_continuation(*original, *restored);
  expect_same_continuation(*original, *restored);
}

TEST(SessionSaveEviction, WithoutAPolicyTheFileIsVersionOneAndRestoresWithNone) {
  Runtime rt(testing::scenario_options(model()));
  testing::load_scenario_adapters(rt, adapter_set("all_linear"));
  auto original = testing::scenario_session(rt);
  const std::string path = lorakv::testing::temp_path("session_v1");
  original->save(path);
  const formats::JsonValue h = header_of(path);
  EXPECT_EQ(h.at("version").as_int(), kSessionFormatVersionWithoutEviction);
  // Version 1's keys, and no more: what older readers took.
  std::vector<std::string> keys;
  for (const auto& [key, value] : h.as_object()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"format", "version", "model_sha256", "options", "agents", "tokens", "layers",
                                             "shared", "own", "checksums"}));
  EXPECT_EQ(read_bytes(path).find("lanes"), std::string::npos);
  EXPECT_FALSE(read_session(path).options.eviction.enabled());
  auto restored = rt.restore_session(path);
  EXPECT_EQ(restored->tokens(), original->tokens());
}

// The safetensors header (8-byte length, then JSON) of `bytes`, rewritten by `edit`.
std::string with_header(const std::string& bytes, const std::function<std::string(std::string)>& edit) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const std::string header = edit(bytes.substr(8, n));
  const uint64_t m = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &m, 8);
  return out + header + bytes.substr(8 + n);
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// Endless streaming (RuntimeOptions::rerotate): base keys stored before RoPE go into a
// version 4 file that says so; the restored session continues bit for bit; a runtime that
// stores keys after RoPE refuses the file naming `rerotate`, and the file claiming version 3
// (which has no such keys) is refused as damaged.
TEST(SessionSaveEviction, ARerotatingSessionIsVersionFourAndRestoresOnlyIntoARerotatingRuntime) {
  RuntimeOptions ro = testing::scenario_options(model());
  ro.rerotate = true;
  Runtime rt(ro);
  testing::load_scenario_adapters(rt, adapter_set("qv_shared_a"));
  SessionOptions o = evicting(SharingMode::kBaseLrShared);
  o.eviction.policy = "streaming_llm";
  o.eviction.sinks = 4;
  o.eviction.protected_spans.clear();
  auto original = testing::scenario_session(rt, o);
  const std::string path = lorakv::testing::temp_path("session_rerotate");
  original->save(path);
  const formats::JsonValue h = header_of(path);
  EXPECT_EQ(h.at("version").as_int(), 4);
  EXPECT_TRUE(h.at("keys_before_rope").as_bool());
  const SessionFile saved = read_session(path);
  EXPECT_TRUE(saved.rows.keys_before_rope);
  ASSERT_TRUE(saved.rows.shared.has_value());
  ASSERT_FALSE(saved.rows.shared->lanes.empty());
  EXPECT_LT(saved.rows.shared->lanes[0].positions.size(), saved.rows.shared->tokens.size())
      << "nothing was evicted: rows at compact indices would not be tested";
  Runtime fresh(ro);
  testing::load_scenario_adapters(fresh, adapter_set("qv_shared_a"));
  auto restored = fresh.restore_session(path);
  expect_same_continuation(*original, *restored);
  expect_same_continuation(*original, *restored);
  Runtime plain(testing::scenario_options(model()));
  testing::load_scenario_adapters(plain, adapter_set("qv_shared_a"));
  try {
    plain.restore_session(path);
    ADD_FAILURE() << "a runtime storing keys after RoPE took keys before it";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.context().key, "rerotate") << e.what();
  }
  const std::string v3 = lorakv::testing::temp_path("session_rerotate_v3");
  write_bytes(v3, replaced(read_bytes(path), "\\\"version\\\": 4,", "\\\"version\\\": 3,"));
  try {
    fresh.restore_session(v3);
    ADD_FAILURE() << "a version 3 file with keys before RoPE was accepted";
  } catch (const SessionFileError& e) {
    EXPECT_NE(std::string(e.what()).find("came with version 4"), std::string::npos) << e.what();
  }
}

TEST(SessionSaveEviction, ADamagedEvictionSectionIsRefusedNamingTheField) {
  Runtime rt(testing::scenario_options(model()));
  testing::load_scenario_adapters(rt, adapter_set("all_linear"));
  const std::string path = lorakv::testing::temp_path("session_evicting_good");
  testing::scenario_session(rt, evicting(SharingMode::kFull))->save(path);
  const std::string good = read_bytes(path);
  auto refusal = [&](const std::string& bytes) -> std::string {
    const std::string bad = lorakv::testing::temp_path("session_evicting_bad");
    write_bytes(bad, bytes);
    try {
      rt.restore_session(bad);
    } catch (const SessionFileError& e) {
      return e.what();
    }
    return "accepted";
  };
  auto says = [](const std::string& message, std::vector<std::string> parts) {
    for (const std::string& p : parts) {
      if (message.find(p) == std::string::npos) return ::testing::AssertionFailure() << "no '" << p << "' in: " << message;
    }
    return ::testing::AssertionSuccess();
  };
  const std::string q = "\\\"";  // a quote inside the header's JSON string
  auto key = [&](const std::string& k) { return q + k + q + ": "; };
  // A key missing, a key the engine refuses.
  EXPECT_TRUE(
      says(refusal(replaced(good, key("leverage_rank"), key("leverage_rang"))), {"leverage_rank", "session_evicting_bad"}));
  EXPECT_TRUE(says(refusal(replaced(good, key("policy") + q + "h2o" + q, key("policy") + q + "h2x" + q)),
                   {"eviction keys are invalid", "eviction.policy", "h2x"}));
  // Version 1 has no eviction: its sequences have no lanes.
  EXPECT_TRUE(
      says(refusal(replaced(good, key("version") + "2,", key("version") + "1,")), {"lanes in a file without eviction"}));
  // The lanes' row counts cut short: they disagree with their flags.
  EXPECT_TRUE(says(refusal(with_header(good, [&](std::string h) {
                     const size_t rows = h.find(key("rows") + "[");
                     const size_t comma = h.find(',', rows);
                     return h.erase(rows + key("rows").size() + 1, comma - rows - key("rows").size());
                   })),
                   {"lanes of another number", "lanes.scored"}));
  // A lanes tensor gone (its entry renamed), one whose bytes do not match their checksum,
  // and one whose checksum matches bytes that are no state eviction leaves.
  const auto rename_live = [](std::string h) { return replaced(h, "\"own0.lanes.live\"", "\"own0.lanes.livf\""); };
  EXPECT_TRUE(says(refusal(with_header(good, rename_live)), {"a tensor is missing", "own0.lanes.live"}));
  const auto file = formats::SafetensorsFile::open(path);
  const formats::SafetensorsTensorInfo& positions = file->tensor("own0.lanes.positions");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, good.data(), 8);
  const size_t at = 8 + header_bytes + positions.data_begin;
  std::string flipped = good;
  std::swap(flipped[at], flipped[at + 4]);  // rows 0 and 1 trade positions (their low bytes)
  EXPECT_TRUE(says(refusal(flipped), {"checksum", "own0.lanes.positions"}));
  const std::string old_sum = digest_hex(Sha256().update(good.data() + at, positions.num_bytes).finish());
  const std::string new_sum = digest_hex(Sha256().update(flipped.data() + at, positions.num_bytes).finish());
  EXPECT_TRUE(says(refusal(replaced(flipped, old_sum, new_sum)), {"positions do not ascend", "own0.lanes[0].positions"}));
  EXPECT_EQ(refusal(good), "accepted");  // the damage, not the file, was refused
}

}  // namespace
}  // namespace lorakv::agents

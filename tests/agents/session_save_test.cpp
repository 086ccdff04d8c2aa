// tests/agents/session_save_test.cpp: a session saved to one file and restored, in this
// process and in another: the same trajectory and, run alone with the same thread count,
// the same logits bit for bit; rows the cache holds already are shared, not copied; a kill
// during a save (a helper process saving in a loop, SIGKILLed) leaves the previous file
// restorable; truncated, corrupt, other-model, other-adapter and other-version files are
// refused naming what is wrong. (The write itself: tests/common/atomic_file_test.cpp.)
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lorakv/agents/errors.h"
#include "lorakv/agents/session_file.h"
#include "lorakv/common/subprocess.h"
#include "tests/agents/session_save_scenario.h"
#include "tests/agents/session_test_util.h"
#include "tests/support/gguf_builder.h"

extern char** environ;

namespace lorakv::agents {
namespace {

namespace fs = std::filesystem;
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
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Restored and original sessions continue alike: the same tokens and the same
// log-probabilities bit for bit (the rows are the same numbers; each runs alone).
void expect_same_continuation(Session& original, Session& restored) {
  EXPECT_EQ(restored.tokens(), original.tokens());
  const Reply a = testing::scenario_next_turn(original);
  const Reply b = testing::scenario_next_turn(restored);
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    EXPECT_EQ(a.logprobs[i], b.logprobs[i]) << "token " << i;
    EXPECT_EQ(a.runner_up_logprobs[i], b.runner_up_logprobs[i]) << "token " << i;
  }
}

TEST(SessionSave, RestoreIsExactAndSharesWhatTheCacheHolds) {
  for (const auto& [set, mode] : {std::pair{"all_linear", SharingMode::kFull}, std::pair{"all_linear", SharingMode::kBaseShared},
                                  std::pair{"qv_shared_a", SharingMode::kBaseLrShared}}) {
    SCOPED_TRACE(runtime::sharing_mode_name(mode));
    Runtime rt(testing::scenario_options(model()));
    testing::load_scenario_adapters(rt, adapter_set(set));
    auto original = testing::scenario_session(rt, {mode, SharedWriter::kFirst});
    const std::string path = lorakv::testing::temp_path(std::string("session_") + runtime::sharing_mode_name(mode));
    original->save(path);
    const SessionStats held = original->stats();
    const int64_t session_bytes = held.shared_kv_bytes + held.own_kv_bytes + held.residual_kv_bytes;
    const int64_t before = rt.stats().kv_bytes_in_use;
    auto restored = rt.restore_session(path);
    // Whole blocks are adopted from the prefix index; only partial tail blocks are copied.
    EXPECT_LT(rt.stats().kv_bytes_in_use - before, session_bytes / 2) << "the restore copied rows the cache holds";
    EXPECT_EQ(restored->agents(), original->agents());
    expect_same_continuation(*original, *restored);
    // Into a runtime that holds nothing: every row from the file.
    Runtime fresh(testing::scenario_options(model()));
    testing::load_scenario_adapters(fresh, adapter_set(set));
    auto alone = fresh.restore_session(path);
    auto again = rt.restore_session(path);
    expect_same_continuation(*again, *alone);
  }
}

// An int8 base pool: the file (version 3) carries the int8 rows and their scales, and the
// restored session continues bit for bit; a runtime whose pool holds another dtype refuses it.
TEST(SessionSave, Int8RowsAndScalesRestoreExactly) {
  RuntimeOptions o = testing::scenario_options(model());
  o.kv_dtype = "int8";
  Runtime rt(o);
  testing::load_scenario_adapters(rt, adapter_set("qv_shared_a"));
  auto original = testing::scenario_session(rt, {SharingMode::kBaseLrShared, SharedWriter::kFirst});
  const std::string path = lorakv::testing::temp_path("session_int8");
  original->save(path);
  const SessionFile f = read_session(path);
  ASSERT_TRUE(f.rows.shared.has_value());
  EXPECT_EQ(f.rows.shared->k[0].scalar_type(), at::kChar);
  EXPECT_EQ(f.rows.shared->k_scale.size(), f.rows.shared->k.size());
  Runtime fresh(o);
  testing::load_scenario_adapters(fresh, adapter_set("qv_shared_a"));
  auto restored = fresh.restore_session(path);
  expect_same_continuation(*original, *restored);
  // The same file claiming version 2, which has no int8 rows, is refused.
  std::string bytes = read_bytes(path);
  const size_t at = bytes.find("\\\"version\\\": 3,");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 13] = '2';  // the digit after the key
  const std::string v2 = lorakv::testing::temp_path("session_int8_v2");
  write_bytes(v2, bytes);
  try {
    fresh.restore_session(v2);
    ADD_FAILURE() << "a version 2 file with int8 rows was accepted";
  } catch (const SessionFileError& e) {
    EXPECT_NE(std::string(e.what()).find("int8 came with version 3"), std::string::npos) << e.what();
  }
  Runtime float32(testing::scenario_options(model()));
  testing::load_scenario_adapters(float32, adapter_set("qv_shared_a"));
  try {
    float32.restore_session(path);
    ADD_FAILURE() << "a float32 runtime took int8 rows";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("int8"), std::string::npos) << e.what();
  }
}

// Writer author: the file (version 5) carries each token's author (an agent's replies and a
// turn appended in its name are its own, the tool's text the base model's), and the restored
// session continues alike; the same file claiming version 4 is refused.
TEST(SessionSave, WriterAuthorKeepsEachTokensAuthor) {
  Runtime rt(testing::scenario_options(model()));
  testing::load_scenario_adapters(rt, adapter_set("qv_shared_a"));
  auto original = testing::scenario_session(rt, {SharingMode::kBaseLrShared, SharedWriter::kAuthor});
  original->append("planner", "Thought: Dok Gramein was born in 1914.");
  const std::string path = lorakv::testing::temp_path("session_author");
  original->save(path);
  const SessionFile f = read_session(path);
  ASSERT_EQ(f.rows.authors.size(), f.rows.tokens.size());
  AdapterIdentity planner, actor;
  for (const SavedAgent& a : f.agents) (a.options.name == "planner" ? planner : actor) = a.adapter;
  std::map<AdapterIdentity, int64_t> tokens_by;
  for (const AdapterIdentity& a : f.rows.authors) ++tokens_by[a];
  EXPECT_GT(tokens_by[planner], 0);
  EXPECT_GT(tokens_by[actor], 0);
  EXPECT_GT(tokens_by[AdapterIdentity::base_model()], 0);
  EXPECT_EQ(tokens_by.size(), 3u);
  EXPECT_EQ(f.rows.authors.back(), planner) << "the turn appended in the planner's name";
  Runtime fresh(testing::scenario_options(model()));
  testing::load_scenario_adapters(fresh, adapter_set("qv_shared_a"));
  auto restored = fresh.restore_session(path);
  expect_same_continuation(*original, *restored);
  std::string bytes = read_bytes(path);
  const size_t at = bytes.find("\\\"version\\\": 5,");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 13] = '4';
  const std::string v4 = lorakv::testing::temp_path("session_author_v4");
  write_bytes(v4, bytes);
  try {
    fresh.restore_session(v4);
    ADD_FAILURE() << "a version 4 file with writer author was accepted";
  } catch (const SessionFileError& e) {
    EXPECT_NE(std::string(e.what()).find("it came with version 5"), std::string::npos) << e.what();
  }
}

TEST(SessionSave, RestoredInAnotherProcessContinuesAlike) {
  Runtime rt(testing::scenario_options(model()));
  testing::load_scenario_adapters(rt, adapter_set("all_linear"));
  auto s = testing::scenario_session(rt);
  const std::string path = lorakv::testing::temp_path("session_other_process");
  s->save(path);
  const ProcessResult child = run_process({LORAKV_SESSION_TOOL, "restore", model(), adapter_set("all_linear"), path},
                                          {/*capture_output=*/true, false});
  ASSERT_EQ(child.exit_code, 0) << child.output;
  std::ostringstream ours;
  for (int32_t id : testing::scenario_next_turn(*s).tokens) ours << id << " ";
  EXPECT_EQ(child.output, ours.str() + "\n");
}

// A helper process saves in a loop and is killed at a random moment, several times: the
// file it leaves is always a complete session (the previous save or the new one).
TEST(SessionSave, KillDuringASaveLeavesARestorableFile) {
  const std::string path = lorakv::testing::temp_path("session_killed");
  fs::remove(path);
  Runtime rt(testing::scenario_options(model()));
  testing::load_scenario_adapters(rt, adapter_set("all_linear"));
  const std::vector<int32_t> expected = testing::scenario_session(rt)->tokens();
  std::mt19937 rng(11);
  for (int round = 0; round < 3; ++round) {
    const std::string tool = LORAKV_SESSION_TOOL, m = model(), a = adapter_set("all_linear");
    std::vector<char*> argv = {const_cast<char*>(tool.c_str()), const_cast<char*>("save-loop"),
                               const_cast<char*>(m.c_str()), const_cast<char*>(a.c_str()),
                               const_cast<char*>(path.c_str()), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, tool.c_str(), &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!fs::exists(path) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 400)(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the helper ended before it was killed (status " << status << ")";
    auto restored = rt.restore_session(path);
    EXPECT_EQ(restored->tokens(), expected) << "round " << round;
  }
}

// Byte patches of a saved file: each refusal names what is wrong.
TEST(SessionSave, DamagedOrForeignFilesAreRefused) {
  Runtime rt(testing::scenario_options(model()));
  testing::load_scenario_adapters(rt, adapter_set("all_linear"));
  const std::string path = lorakv::testing::temp_path("session_good");
  testing::scenario_session(rt)->save(path);
  const std::string good = read_bytes(path);
  auto refusal = [&](const std::string& bytes) -> std::string {
    const std::string bad = lorakv::testing::temp_path("session_bad");
    write_bytes(bad, bytes);
    try {
      rt.restore_session(bad);
    } catch (const SessionFileError& e) {
      return e.what();
    }
    return "accepted";
  };
  auto patched = [&](const std::string& from, const std::string& to) {
    std::string bytes = good;
    const size_t at = bytes.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) bytes.replace(at, from.size(), to);
    return bytes;
  };
  EXPECT_NE(refusal(good.substr(0, good.size() / 2)).find("not a readable session file"), std::string::npos);
  std::string flipped = good;
  flipped[flipped.size() - 100] = static_cast<char>(flipped[flipped.size() - 100] ^ 0x40);
  EXPECT_NE(refusal(flipped).find("checksum"), std::string::npos);
  EXPECT_NE(refusal(patched("\\\"version\\\": 1,", "\\\"version\\\": 7,")).find("unknown session format version 7"),
            std::string::npos);
  const std::string model_hex = model_files_sha256(model());
  std::string other_model = model_hex;
  other_model[0] = other_model[0] == '0' ? '1' : '0';
  EXPECT_NE(refusal(patched(model_hex, other_model)).find("another model"), std::string::npos);
  const std::string marker = "adapter_sha256\\\": \\\"";
  const size_t at = good.find(marker);
  ASSERT_NE(at, std::string::npos);
  std::string other_adapter = good;
  char& digit = other_adapter[at + marker.size()];
  digit = digit == '0' ? '1' : '0';
  EXPECT_NE(refusal(other_adapter).find("not the one the session was saved with"), std::string::npos);
  EXPECT_EQ(refusal(good), "accepted");  // the patches above, not the file, were refused
}

}  // namespace
}  // namespace lorakv::agents

// tests/agents/session_roles_test.cpp: a session reproduces the layout the role adapters were
// trained on, token for token, and an agent's turn is PEFT's greedy turn. The oracle is
// tools/role_adapter_oracle.py (the role_oracle fixture): per role of the all-linear set and
// held-out trajectory, the ids cut after the role's last turn and PEFT's greedy decode of
// that turn from the gold prefix, with its top-2 margins. The session is built from the
// trajectory's text (assets/agentic_qa/test.jsonl) through append() and generate() only.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "lorakv/formats/json.h"
#include "lorakv/formats/safetensors_file.h"
#include "tests/agents/session_test_util.h"
#include "tests/support/reference_values.h"

namespace lorakv::agents {
namespace {

using lorakv::testing::json_doubles;
using lorakv::testing::json_ints;

struct Turn {
  std::string role, text;
  bool train = true;
};

std::map<std::string, std::vector<Turn>> read_trajectories(const std::string& path) {
  std::map<std::string, std::vector<Turn>> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const formats::JsonValue rec = formats::parse_json(line);
    std::vector<Turn>& turns = out[rec.at("id").as_string()];
    for (const formats::JsonValue& t : rec.at("turns").as_array()) {
      const formats::JsonValue* train = t.find("train");
      turns.push_back({t.at("role").as_string(), t.at("text").as_string(), train == nullptr || train->as_bool()});
    }
  }
  return out;
}

TEST(SessionRoles, TurnIsPeftsGreedyTurnOnTheTrainedLayout) {
  const std::string oracle = lorakv::testing::test_setting("LORAKV_ORACLE_DIR") + "/roles/role_reference.safetensors";
  const auto reference = formats::SafetensorsFile::open(oracle);
  const formats::JsonValue meta = formats::parse_json(reference->metadata().at("oracle"));
  const auto trajectories =
      read_trajectories(lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/assets/agentic_qa/test.jsonl");
  auto rt = testing::make_role_runtime();
  int checked = 0;
  for (const formats::JsonValue& e : meta.at("entries").as_array()) {
    if (e.at("set").as_string() != "all_linear") continue;
    const std::string role = e.at("role").as_string();
    const std::string key = e.at("key").as_string();
    const std::vector<int32_t> ids = json_ints(e.at("ids"));
    const auto turn_start = static_cast<size_t>(e.at("turn_start").as_int());
    const std::vector<int32_t> greedy = json_ints(e.at("greedy_ids"));
    const std::vector<double> margins = json_doubles(e.at("greedy_margins"));
    const std::vector<Turn>& turns = trajectories.at(e.at("trajectory").as_string());

    auto session = rt->open_session();
    for (const char* agent : {"planner", "actor", "reflector"}) session->add_agent({agent, agent, ""});
    size_t last = 0;  // the role's last trained turn: the oracle cut after it
    for (size_t t = 0; t < turns.size(); ++t) {
      if (turns[t].role == role && turns[t].train) last = t;
    }
    for (size_t t = 0; t < last; ++t) session->append(turns[t].role, turns[t].text);
    std::vector<int32_t> prefix = session->tokens();
    // The oracle's prefix holds the role's header too: the session runs it privately.
    ASSERT_LT(prefix.size(), turn_start) << key;
    ASSERT_EQ(prefix, std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<int64_t>(prefix.size()))) << key;

    GenerateOptions options;
    options.max_tokens = static_cast<int64_t>(greedy.size());
    const Reply reply = session->generate(role, options);
    const size_t d = testing::first_difference(reply.tokens, greedy);
    if (d < greedy.size()) {
      // PEFT's margins are logits; float32 orders candidates closer than about 1e-4 apart either way.
      ASSERT_LT(margins[d], testing::kBatchMargin) << key << " step " << d << ": ours " << reply.tokens.at(d)
                                                    << ", PEFT " << greedy[d];
      std::printf("  near tie accepted: %s step %zu\n", key.c_str(), d);
    } else {
      EXPECT_EQ(reply.tokens.size(), greedy.size()) << key;
    }
    // The trajectory now holds the turn as the layout has it: the oracle's ids (the gold
    // prefix, header included), the reply, <|im_end|> where the reply did not end with it, "\\n".
    std::vector<int32_t> expected(ids.begin(), ids.begin() + static_cast<int64_t>(turn_start));
    expected.insert(expected.end(), reply.tokens.begin(), reply.tokens.end());
    if (reply.tokens.empty() || reply.tokens.back() != 2) expected.push_back(2);
    expected.push_back(198);
    EXPECT_EQ(session->tokens(), expected) << key;
    EXPECT_TRUE(reply.appended);
    std::printf("  %-22s %s\n", key.c_str(), reply.text.c_str());
    ++checked;
  }
  EXPECT_EQ(checked, 6) << "the oracle should hold 3 roles x 2 trajectories of the all-linear set";
}

}  // namespace
}  // namespace lorakv::agents

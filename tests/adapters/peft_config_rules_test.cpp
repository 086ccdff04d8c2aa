// tests/adapters/peft_config_rules_test.cpp: the torch-free PEFT target rules on hostile
// adapter_config.json values: regular expressions that would take exponential time or
// use back-references, and the fuzz corpus (fuzz/corpus/peft_config) replayed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>

#include "lorakv/adapters/peft_config_rules.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/json.h"
#include "tests/support/test_settings.h"

namespace lorakv::adapters {
namespace {

constexpr int64_t kLayers = 2;

PeftRules rules_from(const std::string& json) {
  return parse_peft_rules("adapter_config.json", formats::parse_json(json), kLayers);
}

// Runs `fn` on a worker thread; a hang fails the test and ends the binary, since a
// thread stuck in a regex cannot be stopped.
template <typename Fn>
void expect_finishes_within(std::chrono::seconds limit, Fn fn) {
  std::packaged_task<void()> task(fn);
  std::future<void> done = task.get_future();
  std::thread(std::move(task)).detach();
  if (done.wait_for(limit) != std::future_status::ready) {
    ADD_FAILURE() << "did not finish within " << limit.count() << " s";
    std::fprintf(stderr, "a regex match hung (exponential backtracking); exiting\n");
    std::_Exit(1);
  }
  done.get();  // rethrows a failure from the worker
}

// The fuzzer's find: "la+.*++..." nests quantifiers (Python's re refuses it); the
// backtracking matcher took minutes on a 31-character module path. "(.|.)*x" and
// "(.*)*(.*)*x" are the classic exponential cases.
TEST(PeftConfigRules, HostileRegexesAreMatchedInPolynomialTime) {
  const std::string patterns[] = {"la+.*+++++++++++++++++++++++++++++++1+++++++++++++++++++}ers", "(.|.)*x",
                                  "(.*)*(.*)*(.*)*x"};
  for (const std::string& p : patterns) {
    SCOPED_TRACE(p);
    const std::string escaped = formats::JsonValue::make_string(p).to_string();
    const PeftRules target = rules_from("{\"target_modules\": " + escaped + "}");
    const PeftRules layers = rules_from("{\"target_modules\": [\"q_proj\"], \"layers_to_transform\": [0], "
                                        "\"layers_pattern\": " + escaped + "}");
    const PeftRules rank = rules_from("{\"rank_pattern\": {" + escaped + ": 2}}");
    expect_finishes_within(std::chrono::seconds(20), [&] {
      EXPECT_FALSE(is_targeted(target, "model.layers.0.self_attn.q_proj", 0));
      EXPECT_FALSE(is_targeted(layers, "model.layers.0.self_attn.q_proj", 0));
      EXPECT_FALSE(pattern_rank(rank, "model.layers.0.self_attn.q_proj").has_value());
    });
  }
  // The same matcher still answers ordinary patterns as PEFT does.
  const PeftRules regex = rules_from(R"({"target_modules": ".*\\.(q_proj|down_proj)$"})");
  EXPECT_TRUE(is_targeted(regex, "model.layers.1.self_attn.q_proj", 1));
  EXPECT_TRUE(is_targeted(regex, "model.layers.0.mlp.down_proj", 0));
  EXPECT_FALSE(is_targeted(regex, "model.layers.0.self_attn.v_proj", 0));
  const PeftRules ranks = rules_from(R"({"rank_pattern": {"layers\\.1\\..*v_proj": 2, "q_proj": 4}})");
  EXPECT_EQ(pattern_rank(ranks, "model.layers.1.self_attn.v_proj"), 2);
  EXPECT_EQ(pattern_rank(ranks, "model.layers.3.self_attn.q_proj"), 4);
  EXPECT_FALSE(pattern_rank(ranks, "model.layers.0.self_attn.v_proj").has_value());
}

// The polynomial matcher cannot do back-references: refused, naming the field.
TEST(PeftConfigRules, BackReferencesAreRefused) {
  const PeftRules rules = rules_from(R"({"target_modules": "(q)\\1_proj"})");
  try {
    is_targeted(rules, "model.layers.0.self_attn.q_proj", 0);
    FAIL() << "expected an AdapterLoadError";
  } catch (const AdapterLoadError& e) {
    EXPECT_EQ(e.context().key, "target_modules");
    EXPECT_EQ(e.context().file, "adapter_config.json");
    EXPECT_NE(std::string(e.what()).find("invalid regular expression"), std::string::npos) << e.what();
  }
}

// The fuzzer's second find: libstdc++ reads "{m,n}" and "\N" numbers into a long with no
// overflow check (undefined behaviour, flagged by UBSan), so long ones are refused first.
TEST(PeftConfigRules, RepeatCountsTooLongForTheRegexCompilerAreRefused) {
  for (const char* json : {R"({"target_modules": "q_proj{0,99999999999999999999}"})",
                           R"({"target_modules": "q{00000000{0000000000000000100000000000000000000,0"})",
                           R"({"target_modules": "(q)\\99999999999999999999"})"}) {
    SCOPED_TRACE(json);
    const PeftRules rules = rules_from(json);
    try {
      is_targeted(rules, "model.layers.0.self_attn.q_proj", 0);
      ADD_FAILURE() << "expected an AdapterLoadError";
    } catch (const AdapterLoadError& e) {
      EXPECT_EQ(e.context().key, "target_modules");
      EXPECT_NE(std::string(e.what()).find("at most 6 digits"), std::string::npos) << e.what();
    }
  }
  // Digits elsewhere, leading zeros and escaped backslashes are not counts.
  EXPECT_TRUE(is_targeted(rules_from(R"({"target_modules": ".*q_proj{0000001}"})"), "model.layers.0.self_attn.q_proj", 0));
  EXPECT_FALSE(is_targeted(rules_from(R"({"target_modules": "a,12345678901|b\\\\12345678901"})"),
                           "model.layers.0.self_attn.q_proj", 0));
}

// Every committed fuzz input (past findings among them) gives rules or a typed error.
TEST(PeftConfigRules, ReplaysTheFuzzCorpusWithTypedErrorsOnly) {
  const std::filesystem::path dir =
      std::filesystem::path(lorakv::testing::test_setting("LORAKV_SOURCE_DIR")) / "fuzz" / "corpus" / "peft_config";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int replayed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    SCOPED_TRACE(entry.path().filename().string());
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    expect_finishes_within(std::chrono::seconds(20), [&] {
      try {
        const PeftRules r = rules_from(text.str());
        for (int64_t layer = 0; layer < kLayers; ++layer) {
          const std::string path = "model.layers." + std::to_string(layer) + ".self_attn.v_proj";
          is_targeted(r, path, layer);
          pattern_rank(r, path);
          pattern_alpha(r, path);
        }
      } catch (const lorakv::Error&) {
        // a typed refusal is an accepted outcome
      }
    });
    ++replayed;
  }
  EXPECT_GE(replayed, 5);
}

}  // namespace
}  // namespace lorakv::adapters

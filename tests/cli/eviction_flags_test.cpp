// tests/cli/eviction_flags_test.cpp: the eviction flags `lorakv perplexity` takes, parsed
// into an EvictionConfig (a '.' makes --budget a fraction, else tokens), every mistake a
// ConfigError naming the flag; and the rule that cuts a text into perplexity windows.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "lorakv/cli/eviction_flags.h"
#include "lorakv/cli/perplexity_options.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {
namespace {

cache::eviction::EvictionConfig parse(const std::vector<std::string>& args) {
  return parse_eviction_flags(CliArgs(args, eviction_value_flags(), eviction_bool_flags(), "perplexity"));
}

// The key of the ConfigError parsing `args` throws ("" when it throws none).
std::string error_key(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const ConfigError& e) {
    return e.context().key;
  }
  return "";
}

TEST(EvictionFlags, DefaultIsNoPolicy) {
  const cache::eviction::EvictionConfig c = parse({});
  EXPECT_EQ(c.policy, "none");
  EXPECT_FALSE(c.enabled());
  EXPECT_EQ(describe_eviction(c), "none");
}

TEST(EvictionFlags, IntegerBudgetIsTokensAndDottedBudgetIsAFraction) {
  const cache::eviction::EvictionConfig tokens =
      parse({"--policy", "h2o", "--budget", "64", "--sinks", "2", "--window", "8"});
  EXPECT_EQ(tokens.policy, "h2o");
  EXPECT_EQ(tokens.budget_tokens, 64);
  EXPECT_EQ(tokens.budget_fraction, 0);
  EXPECT_EQ(tokens.sinks, 2);
  EXPECT_EQ(tokens.window, 8);
  EXPECT_EQ(describe_eviction(tokens), "h2o, budget 64 tokens, sinks 2, window 8, scoring sum");

  const cache::eviction::EvictionConfig fraction = parse({"--policy", "streaming_llm", "--budget", "0.25"});
  EXPECT_EQ(fraction.budget_tokens, 0);
  EXPECT_DOUBLE_EQ(fraction.budget_fraction, 0.25);
  EXPECT_EQ(fraction.sinks, 4);  // the defaults
  EXPECT_EQ(fraction.window, 16);
  EXPECT_DOUBLE_EQ(parse({"--policy", "h2o", "--budget", "1.0"}).budget_fraction, 1.0);
}

TEST(EvictionFlags, BadValuesNameTheirFlag) {
  EXPECT_EQ(error_key({"--policy", "lru", "--budget", "64"}), "--policy");
  for (const char* budget : {"0", "1.5", "abc", "-3", "0.0", "1e2", "64k", ""}) {
    EXPECT_EQ(error_key({"--policy", "h2o", "--budget", budget}), "--budget") << "--budget '" << budget << "'";
  }
  EXPECT_EQ(error_key({"--policy", "h2o", "--budget", "64", "--sinks", "-1"}), "--sinks");
  EXPECT_EQ(error_key({"--policy", "h2o", "--budget", "64", "--window", "x"}), "--window");
}

TEST(EvictionFlags, UnknownPolicyListsTheNames) {
  try {
    parse({"--policy", "lru"});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("none, streaming_llm, h2o"), std::string::npos) << e.what();
  }
}

TEST(EvictionFlags, BudgetNeedsAPolicyAndAPolicyNeedsABudget) {
  EXPECT_EQ(error_key({"--budget", "64"}), "--budget");
  EXPECT_EQ(error_key({"--policy", "none", "--budget", "64"}), "--budget");
  EXPECT_EQ(error_key({"--sinks", "2"}), "--sinks");
  EXPECT_EQ(error_key({"--policy", "streaming_llm"}), "--budget");
  try {
    parse({"--policy", "streaming_llm"});
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs --budget"), std::string::npos) << e.what();
    EXPECT_FALSE(e.context().hint.empty());
  }
}

TEST(EvictionFlags, ThePoliciesOwnKeys) {
  const cache::eviction::EvictionConfig max = parse({"--policy", "h2o", "--budget", "64", "--scoring", "max"});
  EXPECT_EQ(max.scoring, "max");
  const cache::eviction::EvictionConfig listed =
      parse({"--policy", "pyramidkv", "--budget", "64", "--layer-budgets", "1,2.5,1", "--pyramid-beta", "4"});
  EXPECT_EQ(listed.layer_budgets, "list");
  EXPECT_EQ(listed.layer_weights, (std::vector<double>{1, 2.5, 1}));
  EXPECT_DOUBLE_EQ(listed.pyramid_beta, 4);
  EXPECT_EQ(parse({"--policy", "pyramidkv", "--budget", "64", "--layer-budgets", "flat"}).layer_budgets, "flat");
  EXPECT_DOUBLE_EQ(parse({"--policy", "adakv", "--budget", "64", "--head-floor", "0.5"}).head_floor, 0.5);
  const cache::eviction::EvictionConfig lev = parse({"--policy", "leverage", "--budget", "64", "--leverage-rank", "4"});
  EXPECT_EQ(lev.leverage_rank, 4);
  EXPECT_EQ(describe_eviction(lev), "leverage, budget 64 tokens, sinks 4, window 16, rank 4");
  EXPECT_EQ(error_key({"--policy", "h2o", "--budget", "64", "--scoring", "mean"}), "--scoring");
  EXPECT_EQ(error_key({"--policy", "streaming_llm", "--budget", "64", "--scoring", "max"}), "--scoring");
  EXPECT_EQ(error_key({"--policy", "pyramidkv", "--budget", "64", "--layer-budgets", "1,-1"}), "--layer-budgets");
  EXPECT_EQ(error_key({"--policy", "pyramidkv", "--budget", "64", "--layer-budgets", "cone"}), "--layer-budgets");
  EXPECT_EQ(error_key({"--policy", "pyramidkv", "--budget", "64", "--pyramid-beta", "0.5"}), "--pyramid-beta");
  EXPECT_EQ(error_key({"--policy", "adakv", "--budget", "64", "--head-floor", "2"}), "--head-floor");
  EXPECT_EQ(error_key({"--policy", "leverage", "--budget", "64", "--leverage-rank", "0"}), "--leverage-rank");
  EXPECT_EQ(error_key({"--scoring", "max"}), "--scoring") << "a policy's key without a policy";
  const cache::eviction::EvictionConfig cap =
      parse({"--policy", "capkv", "--budget", "64", "--capkv-tau", "2.5", "--capkv-future-positions", "64"});
  EXPECT_DOUBLE_EQ(cap.capkv_tau, 2.5);
  EXPECT_EQ(cap.capkv_future_positions, 64);
  EXPECT_EQ(describe_eviction(cap), "capkv, budget 64 tokens, sinks 4, window 16, scoring writer, tau 2.5, 64 future positions");
  EXPECT_EQ(error_key({"--policy", "capkv", "--budget", "64", "--capkv-tau", "-1"}), "--capkv-tau");
  EXPECT_EQ(error_key({"--policy", "capkv", "--budget", "64", "--capkv-future-positions", "0"}), "--capkv-future-positions");
  EXPECT_EQ(error_key({"--policy", "capkv", "--budget", "64", "--scoring", "sum"}), "--scoring");
  EXPECT_EQ(error_key({"--capkv-tau", "3"}), "--capkv-tau") << "a policy's key without a policy";
}

TEST(EvictionFlags, WindowGrowthAndLossBound) {
  const cache::eviction::EvictionConfig e = parse({"--policy", "h2o", "--budget", "64", "--window-growth", "0.5", "--loss-bound"});
  EXPECT_DOUBLE_EQ(e.window_growth, 0.5);
  EXPECT_TRUE(e.loss_bound);
  EXPECT_EQ(describe_eviction(e), "h2o, budget 64 tokens, sinks 4, window 16 + 0.5 per reply token, scoring sum");
  EXPECT_FALSE(parse({"--policy", "h2o", "--budget", "64"}).loss_bound) << "off unless asked";
  EXPECT_EQ(error_key({"--policy", "h2o", "--budget", "64", "--window-growth", "-1"}), "--window-growth");
  EXPECT_EQ(error_key({"--loss-bound"}), "--loss-bound") << "without a policy nothing is evicted";
  EXPECT_EQ(error_key({"--window-growth", "1"}), "--window-growth");
}

using Windows = std::vector<std::pair<int64_t, int64_t>>;

TEST(PerplexityWindows, FullWindowsThenALastOneOnlyWhenItHoldsAChunk) {
  EXPECT_EQ(plan_windows(600, 256, 32), (Windows{{0, 256}, {256, 512}, {512, 600}}));
  EXPECT_EQ(plan_windows(600, 256, 100), (Windows{{0, 256}, {256, 512}}));  // 88 < 100: dropped
  EXPECT_EQ(plan_windows(512, 256, 32), (Windows{{0, 256}, {256, 512}}));
  EXPECT_EQ(plan_windows(513, 256, 1), (Windows{{0, 256}, {256, 512}}));  // a 1-token window scores nothing
}

TEST(PerplexityWindows, ATextShorterThanAWindowIsOneWindow) {
  EXPECT_EQ(plan_windows(100, 1024, 256), (Windows{{0, 100}}));
  EXPECT_EQ(plan_windows(2, 1024, 256), (Windows{{0, 2}}));
  EXPECT_TRUE(plan_windows(1, 1024, 256).empty());
}

}  // namespace
}  // namespace lorakv::cli

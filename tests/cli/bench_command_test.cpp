// tests/cli/bench_command_test.cpp: `lorakv bench memory` and `lorakv bench sessions` refuse
// bad flags before they load anything, naming the flag; --help prints the usage. (The
// benchmarks themselves run outside `make test`: LORAKV_BENCH=memory|sessions make bench.)
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "lorakv/cli/cli.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {
namespace {

std::string refusal(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  try {
    run_cli(args, out, err);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(BenchCommand, BadFlagsAreRefusedNamingThem) {
  EXPECT_NE(refusal({"bench", "speed"}).find("unknown benchmark"), std::string::npos);
  EXPECT_NE(refusal({"bench", "memory", "--parts", "memory,colour"}).find("colour"), std::string::npos);
  EXPECT_NE(refusal({"bench", "memory", "--lengths", "512,0"}).find("--lengths"), std::string::npos);
  EXPECT_NE(refusal({"bench", "memory", "--agents", "two"}).find("--agents"), std::string::npos);
  EXPECT_NE(refusal({"bench", "memory", "--quick", "--full"}).find("exclude"), std::string::npos);
  EXPECT_NE(refusal({"bench", "memory", "--repetitions", "0"}).find("--repetitions"), std::string::npos);
  EXPECT_NE(refusal({"bench", "memory", "--no-such-flag"}).find("--no-such-flag"), std::string::npos);
}

TEST(BenchCommand, SessionsBenchRefusesBadFlagsNamingThem) {
  EXPECT_NE(refusal({"bench", "sessions", "--sessions", "4,0"}).find("--sessions"), std::string::npos);
  EXPECT_NE(refusal({"bench", "sessions", "--sessions", "four"}).find("--sessions"), std::string::npos);
  EXPECT_NE(refusal({"bench", "sessions", "--turns", "0"}).find("--turns"), std::string::npos);
  EXPECT_NE(refusal({"bench", "sessions", "--tokens", "-3"}).find("--tokens"), std::string::npos);
  EXPECT_NE(refusal({"bench", "sessions", "--capacity-sessions", "-1"}).find("--capacity-sessions"), std::string::npos);
  EXPECT_NE(refusal({"bench", "sessions", "--agents", "3"}).find("--agents"), std::string::npos);
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"bench", "sessions", "--help"}, out, err), 0);
  for (const char* word : {"scheduler", "sequential", "driver", "sessions.csv", "base_lr_shared", "--capacity-sessions"}) {
    EXPECT_NE(out.str().find(word), std::string::npos) << word;
  }
}

TEST(BenchCommand, HelpNamesTheModesAndOutputs) {
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"bench", "memory", "--help"}, out, err), 0);
  for (const char* word : {"full_shared", "base_lr_shared", "memory.csv", "--quick", "--full"}) {
    EXPECT_NE(out.str().find(word), std::string::npos) << word;
  }
}

}  // namespace
}  // namespace lorakv::cli

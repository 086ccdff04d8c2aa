// tests/cli/bench_command_test.cpp: `lorakv bench memory` refuses bad flags before it
// loads anything, naming the flag; --help prints the usage. (The benchmark itself runs
// outside `make test`: LORAKV_BENCH=memory make bench.)
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

TEST(BenchCommand, HelpNamesTheModesAndOutputs) {
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"bench", "memory", "--help"}, out, err), 0);
  for (const char* word : {"full_shared", "base_lr_shared", "memory.csv", "--quick", "--full"}) {
    EXPECT_NE(out.str().find(word), std::string::npos) << word;
  }
}

}  // namespace
}  // namespace lorakv::cli

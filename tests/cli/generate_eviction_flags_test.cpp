// tests/cli/generate_eviction_flags_test.cpp: `lorakv generate` takes the eviction flags of
// `lorakv perplexity` (cli/eviction_flags.h) and checks them before it loads anything: the
// model here is a file of junk text, so a ConfigError naming the flag shows the check came
// first, and a ModelLoadError that valid flags got through.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/cli/cli.h"
#include "lorakv/common/errors.h"
#include "tests/support/gguf_builder.h"

namespace lorakv::cli {
namespace {

std::string junk_model() {
  static const std::string path = [] {
    const std::string p = lorakv::testing::temp_path("junk-model-eviction.gguf");
    std::ofstream(p) << "not a model, just text";
    return p;
  }();
  return path;
}

// "ConfigError: <message>", "ModelLoadError", or "none".
std::string outcome(std::vector<std::string> flags) {
  std::vector<std::string> args = {"generate", "--model", junk_model(), "--log-level", "off", "--prompt", "hi"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::ostringstream out, err;
  try {
    run_cli(args, out, err);
  } catch (const ConfigError& e) {
    return std::string("ConfigError: ") + e.what();
  } catch (const ModelLoadError&) {
    return "ModelLoadError";
  }
  return "none";
}

TEST(GenerateEvictionFlags, ValidFlagsReachTheModelLoad) {
  EXPECT_EQ(outcome({"--policy", "h2o", "--budget", "256"}), "ModelLoadError");
  EXPECT_EQ(outcome({"--policy", "streaming_llm", "--budget", "0.25", "--sinks", "2", "--window", "8"}), "ModelLoadError");
  EXPECT_EQ(outcome({"--policy", "none"}), "ModelLoadError");
  EXPECT_EQ(outcome({"--policy", "streaming_llm", "--budget", "256", "--kv-dtype", "int8", "--rerotate"}), "ModelLoadError");
}

TEST(GenerateEvictionFlags, MistakesNameTheirFlagBeforeTheModelLoads) {
  struct Case {
    std::vector<std::string> flags;
    std::string flag;
  };
  const std::vector<Case> cases = {{{"--budget", "256"}, "[--budget]"},
                                   {{"--sinks", "2"}, "[--sinks]"},
                                   {{"--policy", "h2o"}, "[--budget]"},
                                   {{"--policy", "h2o", "--budget", "0"}, "[--budget]"},
                                   {{"--policy", "h2o", "--budget", "1.5"}, "[--budget]"},
                                   {{"--policy", "bogus", "--budget", "8"}, "[--policy]"},
                                   {{"--kv-dtype", "int4"}, "[--kv-dtype]"}};
  for (const Case& c : cases) {
    const std::string o = outcome(c.flags);
    EXPECT_EQ(o.rfind("ConfigError: ", 0), 0u) << c.flags[0] << ": " << o;
    EXPECT_NE(o.find(c.flag), std::string::npos) << o;
  }
}

TEST(GenerateEvictionFlags, HelpListsThem) {
  std::ostringstream out, err;
  ASSERT_EQ(run_cli({"generate", "--help"}, out, err), 0);
  for (const char* flag : {"--policy", "--budget", "--sinks", "--window", "--kv-dtype", "--rerotate"}) {
    EXPECT_NE(out.str().find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace lorakv::cli

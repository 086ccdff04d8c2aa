// tests/cli/generate_command_test.cpp: `lorakv generate` through run_cli on the real
// model: chat formatting picked by name, and bad flag combinations as ConfigErrors.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "lorakv/cli/cli.h"
#include "lorakv/common/errors.h"
#include "tests/support/test_settings.h"

namespace lorakv::cli {
namespace {

std::vector<std::string> generate_args(std::vector<std::string> extra) {
  std::vector<std::string> args = {"generate", "--model", lorakv::testing::test_setting("LORAKV_MODEL"),
                                   "--log-level", "off", "--max-tokens", "12"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(GenerateCommand, ChatFormatByNameAnswersAndStopsAtEndOfTurn) {
  std::ostringstream out, err;
  ASSERT_EQ(run_cli(generate_args({"--chat", "--chat-format", "chatml", "--prompt", "What is the capital of France?"}),
                    out, err),
            0);
  EXPECT_NE(out.str().find("Paris"), std::string::npos) << out.str();
  EXPECT_NE(err.str().find("finish: stop_token"), std::string::npos) << err.str();
}

TEST(GenerateCommand, BadChatFlagsAreConfigErrors) {
  std::ostringstream out, err;
  EXPECT_THROW(run_cli(generate_args({"--chat", "--chat-format", "bogus", "--prompt", "hi"}), out, err), ConfigError);
  EXPECT_THROW(run_cli(generate_args({"--chat-format", "chatml", "--prompt", "hi"}), out, err), ConfigError);
  EXPECT_THROW(run_cli(generate_args({"--prompt", "hi", "--top-p", "0"}), out, err), ConfigError);
}

}  // namespace
}  // namespace lorakv::cli

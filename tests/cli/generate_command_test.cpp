// tests/cli/generate_command_test.cpp: `lorakv generate` through run_cli on the real
// model: chat formatting picked by name, bad flag combinations as ConfigErrors, and a prompt
// past the model's context refused before it runs.
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

// A prompt past the model's 8,192 positions is refused before any step runs, naming the flag,
// the limit and the prompt's length; streaming with rerotate is the way past it.
TEST(GenerateCommand, APromptLongerThanTheContextIsRefusedAtOnce) {
  std::string long_prompt;
  for (int i = 0; i < 9000; ++i) long_prompt += " word";
  std::ostringstream out, err;
  try {
    run_cli(generate_args({"--prompt", long_prompt}), out, err);
    FAIL() << "a prompt past the model's context ran";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[--prompt]"), std::string::npos) << what;
    EXPECT_NE(what.find("at most 8191 tokens"), std::string::npos) << what;
    EXPECT_NE(what.find("9000 tokens"), std::string::npos) << what;
  }
  EXPECT_TRUE(out.str().empty()) << out.str();
}

}  // namespace
}  // namespace lorakv::cli

// tests/cli/generate_command_test.cpp: `lorakv generate` through run_cli on the real
// model: chat formatting picked by name, bad flag combinations as ConfigErrors, a prompt
// past the model's context refused before it runs, --logprobs as decoded text, --json
// events, and the prefill and decode rates apart.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/cli/cli.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/json.h"
#include "lorakv/formats/unicode.h"
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

// Each piece, unescaped, joins into the text printed above it: the pieces are decoded
// bytes (not the vocabulary's "Ċ" and "Ġ" symbols) and the escaping loses nothing.
TEST(GenerateCommand, LogprobsPrintEachTokenAsEscapedText) {
  std::ostringstream out, err;
  const std::string prompt = "<|im_start|>user\nList three colours, one per line.<|im_end|>\n<|im_start|>assistant\n";
  ASSERT_EQ(run_cli(generate_args({"--prompt", prompt, "--logprobs"}), out, err), 0);
  const std::string text = out.str();
  std::string line, joined;
  const size_t first = text.find("\nlogprob\t");
  ASSERT_NE(first, std::string::npos) << text;
  const std::string generated = text.substr(0, first);
  std::istringstream rows(text.substr(first + 1));
  int n = 0;
  while (std::getline(rows, line)) {
    const std::regex row("logprob\t(.*)\t([0-9]+)\t(-[0-9.]+|0\\.00000)");
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, row)) << line;
    const std::string piece = m[1];
    EXPECT_EQ(piece.find("\xc4\x8a"), std::string::npos) << "a vocabulary symbol (Ċ): " << line;
    EXPECT_EQ(piece.find("\xc4\xa0"), std::string::npos) << "a vocabulary symbol (Ġ): " << line;
    for (size_t i = 0; i < piece.size(); ++i) {
      if (piece[i] != '\\') {
        joined += piece[i];
        continue;
      }
      const char e = piece[++i];
      joined += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
    }
    ++n;
  }
  EXPECT_EQ(n, 12);
  EXPECT_NE(joined.find('\n'), std::string::npos) << "the prompt should give a newline token: " << joined;
  EXPECT_EQ(joined.substr(0, generated.size()), generated);
}

TEST(GenerateCommand, JsonPrintsTextEventsAResultAndStats) {
  std::ostringstream out, err;
  ASSERT_EQ(run_cli(generate_args({"--prompt", "The capital of France is", "--json", "--logprobs"}), out, err), 0);
  std::istringstream lines(out.str());
  std::vector<formats::JsonValue> events;
  for (std::string line; std::getline(lines, line);) events.push_back(formats::parse_json(line));
  ASSERT_GE(events.size(), 3u) << out.str();
  std::string streamed;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    ASSERT_EQ(events[i].at("event").as_string(), "text") << out.str();
    streamed += events[i].at("text").as_string();
  }
  const formats::JsonValue& result = events[events.size() - 2];
  const formats::JsonValue& stats = events.back();
  ASSERT_EQ(result.at("event").as_string(), "result");
  EXPECT_EQ(result.at("text").as_string(), streamed);
  EXPECT_EQ(result.at("adapter").as_string(), "base");
  EXPECT_EQ(result.at("tokens").as_array().size(), 12u);
  std::string from_bytes;
  for (const formats::JsonValue& lp : result.at("logprobs").as_array()) {
    EXPECT_LE(lp.at("logprob").as_number().value, 0.0);
    for (const formats::JsonValue& b : lp.at("bytes").as_array()) from_bytes += static_cast<char>(b.as_int());
  }
  EXPECT_EQ(from_bytes, streamed);  // no stop token: the bytes are the text
  ASSERT_EQ(stats.at("event").as_string(), "stats");
  EXPECT_EQ(stats.at("generated_tokens").as_int(), 12);
  EXPECT_GT(stats.at("prefill_s").as_number().value, 0.0);
  EXPECT_GT(stats.at("decode_tokens_per_s").as_number().value, 0.0);
  EXPECT_NEAR(stats.at("prefill_s").as_number().value + stats.at("decode_s").as_number().value, stats.at("seconds").as_number().value, 1e-9);
  EXPECT_EQ(err.str().find("[prompt"), std::string::npos) << "with --json the stats go to stdout only";
}

// The stats line gives the prompt's rate and the generation's apart.
TEST(GenerateCommand, StatsLineSeparatesPrefillAndDecode) {
  std::ostringstream out, err;
  ASSERT_EQ(run_cli(generate_args({"--prompt", "Once upon a time"}), out, err), 0);
  const std::regex stats(R"(\[prompt [0-9]+ tokens in [0-9.]+ s \([0-9.]+ tokens/s\), generated 12 tokens in [0-9.]+ s )"
                         R"(\(decode [0-9.]+ tokens/s\), finish: length\])");
  EXPECT_TRUE(std::regex_search(err.str(), stats)) << err.str();
}

// With --json a failure after the flags is an error event on stdout, before the exit.
TEST(GenerateCommand, JsonFailureIsAnErrorEvent) {
  const std::string junk = ::testing::TempDir() + "/lorakv_junk_model.gguf";
  std::ofstream(junk) << "not a model";
  std::ostringstream out, err;
  EXPECT_EQ(run_cli_main({"generate", "--model", junk, "--prompt", "hi", "--json"}, out, err), kExitError);
  const formats::JsonValue event = formats::parse_json(out.str());
  EXPECT_EQ(event.at("event").as_string(), "error");
  EXPECT_EQ(event.at("exit_code").as_int(), kExitError);
  EXPECT_EQ(event.at("message").as_string().rfind("model load error", 0), 0u) << out.str();
  EXPECT_NE(err.str().find("model load error"), std::string::npos);
}

// A reply cut at max_tokens inside a character ends with U+FFFD, never with the
// character's first bytes (greedy, this prompt's 20th token is the first of two that
// spell one character; before, stdout ended "\xe5\xb0"-style).
TEST(GenerateCommand, AReplyCutInsideACharacterStaysValidUtf8) {
  std::ostringstream out, err;
  const std::string poem = "\xe8\xaf\xb7\xe7\x94\xa8\xe4\xb8\xad\xe6\x96\x87\xe5\x86\x99\xe4\xb8\x80\xe9\xa6\x96"
                           "\xe5\x85\xb3\xe4\xba\x8e\xe6\x9c\x88\xe4\xba\xae\xe7\x9a\x84\xe8\xaf\x97\xe3\x80\x82";
  std::vector<std::string> args = generate_args({"--prompt", poem});
  args[6] = "20";  // --max-tokens
  ASSERT_EQ(run_cli(args, out, err), 0);
  const std::string text = out.str();
  EXPECT_EQ(formats::utf8_replace_invalid(text), text) << "ill-formed UTF-8 in the output";
  EXPECT_EQ(text.substr(text.size() - 4), "\xEF\xBF\xBD\n") << "the cut character";
}

}  // namespace
}  // namespace lorakv::cli

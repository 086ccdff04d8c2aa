// tests/cli/chat_command_test.cpp: `lorakv chat` on the real model: the system turn once per
// conversation, /stats and /reset, and Ctrl-C: the first ends the reply in flight (the
// chat goes on), one at the prompt ends the session with its summary and transcript.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include "lorakv/cli/cli.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/formats/json.h"
#include "tests/support/test_settings.h"

namespace lorakv::cli {
namespace {

std::vector<std::string> chat_args(const std::string& transcript, const std::string& max_tokens,
                                   const std::string& system = "You answer in one word.") {
  return {"--model", lorakv::testing::test_setting("LORAKV_MODEL"), "--system", system,
          "--max-tokens", max_tokens, "--transcript", transcript};
}

std::string temp_file(const std::string& name) { return ::testing::TempDir() + "/lorakv_chat_" + name; }

// Each transcript line's role, and the text of the agent's turns' `end`.
std::vector<formats::JsonValue> transcript(const std::string& path) {
  std::ifstream in(path);
  std::vector<formats::JsonValue> turns;
  for (std::string line; std::getline(in, line);) turns.push_back(formats::parse_json(line));
  return turns;
}

std::vector<std::string> roles(const std::vector<formats::JsonValue>& turns) {
  std::vector<std::string> out;
  for (const formats::JsonValue& t : turns) out.push_back(t.at("role").as_string());
  return out;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(ChatCommand, SystemTurnOncePerConversationStatsAndReset) {
  const std::string path = temp_file("reset.jsonl");
  std::istringstream in("Hello.\nAnd again.\n/stats\n/reset\nHi.\n/bogus\n");
  std::ostringstream out;
  ASSERT_EQ(run_chat(chat_args(path, "3"), in, out), 0);
  EXPECT_EQ(roles(transcript(path)), (std::vector<std::string>{"system", "user", "assistant", "user", "assistant",
                                                                "system", "user", "assistant"}));
  EXPECT_EQ(count(out.str(), "\nsummary (full, "), 2u) << out.str();  // /stats, then the end
  EXPECT_EQ(count(out.str(), "(conversation reset)"), 1u) << out.str();
  EXPECT_EQ(count(out.str(), "commands: /reset"), 1u) << out.str();  // /bogus: the commands
}

TEST(ChatCommand, RefusesTwoAdaptersAndArguments) {
  std::istringstream in;
  std::ostringstream out;
  const std::string model = lorakv::testing::test_setting("LORAKV_MODEL");
  EXPECT_THROW(run_chat({"--model", model, "stray"}, in, out), UsageError);
  EXPECT_THROW(run_chat({"--system", "x"}, in, out), UsageError);  // --model is required
  EXPECT_THROW(run_chat({"--model", model, "--kv-dtype", "int3"}, in, out), UsageError);
}

// Raises SIGINT once, from the thread that prints, when the agent's first text arrives
// after its "[assistant] " prefix: Ctrl-C while the reply streams.
class InterruptOnReply : public std::stringbuf {
 protected:
  int sync() override {
    const std::string& text = str();
    const size_t prefix = text.find("[assistant] ");
    if (!raised_ && prefix != std::string::npos && text.size() > prefix + 13) {
      raised_ = true;
      std::raise(SIGINT);
    }
    return std::stringbuf::sync();
  }

 private:
  bool raised_ = false;
};

// Gives its text, then raises SIGINT when asked for more: Ctrl-C at the prompt.
class InterruptAtPrompt : public std::streambuf {
 public:
  explicit InterruptAtPrompt(std::string text) : text_(std::move(text)) {
    setg(text_.data(), text_.data(), text_.data() + text_.size());
  }

 protected:
  int_type underflow() override {
    std::raise(SIGINT);
    return traits_type::eof();
  }

 private:
  std::string text_;
};

TEST(ChatCommand, CtrlCEndsTheReplyThenAtThePromptEndsTheSession) {
  const std::string path = temp_file("interrupt.jsonl");
  std::filesystem::remove(path);
  InterruptAtPrompt input("Tell me a very long story about a dragon.\n");
  std::istream in(&input);
  InterruptOnReply output;
  std::ostream out(&output);
  // Greedy, this story runs past 500 tokens, and 2000 would take most of a minute: the
  // reply must end long before.
  const int code = run_chat(chat_args(path, "2000", "You tell long stories."), in, out);
  const std::string text = output.str();
  EXPECT_EQ(code, kExitInterrupted) << text;
  EXPECT_NE(text.find("(cancelled)"), std::string::npos) << text;
  EXPECT_NE(text.find("\nsummary (full, "), std::string::npos) << text;
  // The cancelled reply is not kept; the rest is written.
  EXPECT_EQ(roles(transcript(path)), (std::vector<std::string>{"system", "user"}));
  const std::string streamed = text.substr(text.find("[assistant] "));
  EXPECT_LT(streamed.size(), 2000u) << "the reply ran on after Ctrl-C: " << streamed;
}

}  // namespace
}  // namespace lorakv::cli

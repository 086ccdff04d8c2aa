// tests/cli/generate_input_test.cpp: what `lorakv generate` takes as its input, parsed without
// a model (cli/generate_options.h): the prompt from standard input (`--prompt -`) or a file
// (`--prompt-file`), escapes in --stop, --threads, and the one loaded adapter used when --use is absent
// (with several, --use is required).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/generate_options.h"
#include "lorakv/common/errors.h"
#include "tests/support/gguf_builder.h"

namespace lorakv::cli {
namespace {

// A model path that exists (only its existence is checked before loading) and an adapter
// folder with the two files a PEFT folder needs (their content is the loader's to check).
struct Files {
  std::string model = lorakv::testing::temp_path("input-test-model.gguf");
  std::string adapter = lorakv::testing::temp_path("input-test-adapter");
  std::string prompt = lorakv::testing::temp_path("input-test-prompt.txt");
  Files() {
    std::ofstream(model) << "junk";
    std::filesystem::create_directories(adapter);
    std::ofstream(std::filesystem::path(adapter) / "adapter_config.json") << "{}";
    std::ofstream(std::filesystem::path(adapter) / "adapter_model.safetensors") << "junk";
    std::ofstream(prompt, std::ios::binary) << "line one\nline two\n";
  }
};

const Files& files() {
  static const Files f;
  return f;
}

GenerateOptions parse(std::vector<std::string> flags, const std::string& standard_input = "") {
  std::vector<std::string> args = {"--model", files().model};
  args.insert(args.end(), flags.begin(), flags.end());
  std::istringstream in(standard_input);
  return parse_generate_options(CliArgs(args, generate_value_flags(), generate_bool_flags(), "generate"), in);
}

std::string config_error(std::vector<std::string> flags, const std::string& standard_input = "") {
  try {
    parse(std::move(flags), standard_input);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(GenerateInput, PromptFromStandardInputAndFromAFile) {
  EXPECT_EQ(parse({"--prompt", "-"}, "from stdin\n").prompts, std::vector<std::string>{"from stdin\n"});
  const GenerateOptions o = parse({"--prompt", "first", "--prompt-file", files().prompt});
  EXPECT_EQ(o.prompts, (std::vector<std::string>{"first", "line one\nline two\n"}));
  EXPECT_EQ(parse({"--prompt-file", files().prompt}).prompts.size(), 1u);  // no --prompt needed
  // A literal "-" is never the prompt; stdin is read once; an empty input is an empty prompt.
  EXPECT_NE(config_error({"--prompt", "-", "--prompt", "-"}, "x").find("read once"), std::string::npos);
  EXPECT_NE(config_error({"--prompt", "-"}, "").find("the prompt is empty"), std::string::npos);
  const std::string missing = config_error({"--prompt-file", files().prompt + ".missing"});
  EXPECT_NE(missing.find("[--prompt-file]"), std::string::npos) << missing;
  EXPECT_NE(config_error({}).find("[--prompt]"), std::string::npos);
}

TEST(GenerateInput, StopStringsTakeEscapes) {
  const GenerateOptions o = parse({"--prompt", "p", "--stop", "\\n", "--stop", "a\\tb\\\\c", "--stop", "plain"});
  EXPECT_EQ(o.request.stop_strings, (std::vector<std::string>{"\n", "a\tb\\c", "plain"}));
  for (const char* bad : {"\\q", "end\\"}) {
    const std::string e = config_error({"--prompt", "p", "--stop", bad});
    EXPECT_NE(e.find("[--stop]"), std::string::npos) << e;
    EXPECT_NE(e.find("unknown escape"), std::string::npos) << e;
  }
}

TEST(GenerateInput, ThreadsAreAFlag) {
  EXPECT_EQ(parse({"--prompt", "p"}).threads, 0);
  EXPECT_EQ(parse({"--prompt", "p", "--threads", "3"}).threads, 3);
  const std::string e = config_error({"--prompt", "p", "--threads", "-1"});
  EXPECT_NE(e.find("[--threads]"), std::string::npos) << e;
}

TEST(GenerateInput, TheOneLoadedAdapterIsUsedWithoutUse) {
  const std::string planner = "planner=" + files().adapter;
  EXPECT_EQ(parse({"--prompt", "a", "--prompt", "b", "--adapter", planner}).uses,
            (std::vector<std::string>{"planner", "planner"}));
  EXPECT_EQ(parse({"--prompt", "a", "--adapter", planner, "--use", "base"}).uses, std::vector<std::string>{"base"});
  EXPECT_TRUE(parse({"--prompt", "a"}).uses.empty());  // no adapter: the base model
  const std::string two = config_error({"--prompt", "a", "--adapter", planner, "--adapter", "critic=" + files().adapter});
  EXPECT_NE(two.find("[--use]"), std::string::npos) << two;
  EXPECT_NE(two.find("one of: base, planner, critic"), std::string::npos) << two;
}

}  // namespace
}  // namespace lorakv::cli

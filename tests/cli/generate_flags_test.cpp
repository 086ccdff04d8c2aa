// tests/cli/generate_flags_test.cpp: `lorakv generate` checks every flag before it loads
// anything. The model here is a file of junk text: if generate tried to load it, the error
// would be a ModelLoadError, so a ConfigError naming the flag shows the check came first.
// The control test proves the junk model would indeed fail at load.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/cli/cli.h"
#include "lorakv/common/errors.h"
#include "tests/support/gguf_builder.h"

namespace lorakv::cli {
namespace {
namespace fs = std::filesystem;

// A junk "model" file, an adapter folder with junk files of the right names and an empty
// folder, made once per process.
struct Paths {
  std::string junk_model = lorakv::testing::temp_path("junk-model.gguf");
  std::string adapter_dir = lorakv::testing::temp_path("adapter-dir");
  std::string empty_dir = lorakv::testing::temp_path("empty-dir");
  Paths() {
    std::ofstream(junk_model) << "not a model, just text";
    fs::create_directories(adapter_dir);
    fs::create_directories(empty_dir);
    // Only the names matter before loading; their content is the loader's to check.
    std::ofstream(fs::path(adapter_dir) / "adapter_config.json") << "{}";
    std::ofstream(fs::path(adapter_dir) / "adapter_model.safetensors") << "junk";
  }
};

const Paths& paths() {
  static const Paths p;
  return p;
}

std::vector<std::string> junk_args(std::vector<std::string> extra) {
  std::vector<std::string> args = {"generate", "--model", paths().junk_model, "--log-level", "off"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

struct Outcome {
  std::string error_type;  // "ConfigError", "ModelLoadError", another Error's kind, or "none"
  std::string message;
};

Outcome run(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  try {
    run_cli(args, out, err);
  } catch (const ConfigError& e) {
    return {"ConfigError", e.what()};
  } catch (const ModelLoadError& e) {
    return {"ModelLoadError", e.what()};
  } catch (const Error& e) {
    return {"Error", e.what()};
  }
  return {"none", ""};
}

TEST(GenerateFlags, ControlValidFlagsReachTheModelLoad) {
  const Outcome o = run(junk_args({"--prompt", "hi", "--adapter", "planner=" + paths().adapter_dir, "--use", "planner",
                                   "--chat", "--chat-format", "chatml", "--dtype", "bf16", "--weights", "float32", "--stop", ".", "--top-p",
                                   "0.5", "--max-tokens", "3"}));
  EXPECT_EQ(o.error_type, "ModelLoadError") << o.message;
}

TEST(GenerateFlags, UnknownUseNameFailsBeforeTheModelLoads) {
  const Outcome o =
      run(junk_args({"--prompt", "hi", "--adapter", "planner=" + paths().adapter_dir, "--use", "plannr"}));
  ASSERT_EQ(o.error_type, "ConfigError") << o.message;
  EXPECT_NE(o.message.find("[--use]"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("'plannr'"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("one of: base, planner"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("hint: load it with --adapter plannr=PATH"), std::string::npos) << o.message;
}

TEST(GenerateFlags, UseNamesAreCheckedPerPrompt) {
  const std::string planner = "planner=" + paths().adapter_dir;
  EXPECT_EQ(run(junk_args({"--prompt", "a", "--prompt", "b", "--adapter", planner, "--use", "base", "--use", "planner"}))
                .error_type,
            "ModelLoadError");
  const Outcome o =
      run(junk_args({"--prompt", "a", "--prompt", "b", "--adapter", planner, "--use", "planner", "--use", "critic"}));
  ASSERT_EQ(o.error_type, "ConfigError") << o.message;
  EXPECT_NE(o.message.find("'critic'"), std::string::npos) << o.message;
  // No --adapter at all: only "base" is known.
  const Outcome none = run(junk_args({"--prompt", "a", "--use", "planner"}));
  ASSERT_EQ(none.error_type, "ConfigError") << none.message;
  EXPECT_NE(none.message.find("one of: base, found"), std::string::npos) << none.message;
}

TEST(GenerateFlags, MissingModelIsNamedWithItsFlag) {
  const std::string missing = lorakv::testing::temp_path("no-such-model.gguf");
  const Outcome o = run({"generate", "--model", missing, "--prompt", "hi", "--use", "nope"});
  ASSERT_EQ(o.error_type, "ConfigError") << o.message;
  EXPECT_NE(o.message.find("[--model]"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find(missing), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("hint: "), std::string::npos) << o.message;
}

TEST(GenerateFlags, CheckpointFolderWithoutTokenizerIsRefusedBeforeLoading) {
  const Outcome o = run({"generate", "--model", paths().empty_dir, "--prompt", "hi"});
  ASSERT_EQ(o.error_type, "ConfigError") << o.message;
  EXPECT_NE(o.message.find("[--model]"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("no tokenizer.json"), std::string::npos) << o.message;
}

// Each bad flag gives a ConfigError naming the flag and the offending value, before loading.
TEST(GenerateFlags, EveryBadValueIsAConfigErrorNamingFlagAndValue) {
  const std::string dir = paths().adapter_dir;
  const std::string missing_adapter = lorakv::testing::temp_path("no-such-adapter");
  struct Case {
    std::vector<std::string> flags;
    std::string flag, value;  // expected in the message
  };
  const std::vector<Case> cases = {
      {{"--prompt", "hi", "--max-tokens", "0"}, "[--max-tokens]", "'0'"},
      {{"--prompt", "hi", "--max-tokens", "12x"}, "[--max-tokens]", "'12x'"},
      {{"--prompt", "hi", "--temperature", "-1"}, "[--temperature]", "'-1'"},
      {{"--prompt", "hi", "--temperature", "nan"}, "[--temperature]", "'nan'"},
      {{"--prompt", "hi", "--top-p", "0"}, "[--top-p]", "'0'"},
      {{"--prompt", "hi", "--top-k", "-3"}, "[--top-k]", "'-3'"},
      {{"--prompt", "hi", "--repetition-penalty", "0"}, "[--repetition-penalty]", "'0'"},
      {{"--prompt", "hi", "--seed", "x"}, "[--seed]", "'x'"},
      {{"--prompt", "hi", "--dtype", "f16"}, "[--dtype]", "'f16'"},
      {{"--prompt", "hi", "--weights", "q4"}, "[--weights]", "'q4'"},
      {{"--prompt", "hi", "--chat", "--chat-format", "bogus"}, "[--chat-format]", "'bogus'"},
      {{"--prompt", "hi", "--chat-format", "chatml"}, "[--chat-format]", "--chat"},
      {{"--prompt", "hi", "--log-level", "loud"}, "[--log-level]", "'loud'"},
      {{"--prompt", "hi", "--stop", ""}, "[--stop]", "\"\""},
      {{"--prompt", ""}, "[--prompt]", "\"\""},
      {{}, "[--prompt]", "missing required flag"},
      {{"--prompt", "hi", "--adapter", "planner"}, "[--adapter]", "'planner'"},
      {{"--prompt", "hi", "--adapter", "=" + dir}, "[--adapter]", "'=" + dir + "'"},
      {{"--prompt", "hi", "--adapter", "base=" + dir}, "[--adapter]", "'base=" + dir + "'"},
      {{"--prompt", "hi", "--adapter", "a=" + dir, "--adapter", "a=" + dir}, "[--adapter]", "'a' twice"},
      {{"--prompt", "hi", "--adapter", "a=" + missing_adapter}, "[--adapter]", missing_adapter},
      {{"--prompt", "hi", "--adapter", "a=" + paths().empty_dir}, "[--adapter]", "no adapter_config.json"},
      {{"--prompt", "a", "--prompt", "b", "--prompt", "c", "--use", "base", "--use", "base"}, "[--use]", "2 values"},
      {{"--prompt", "hi", "stray"}, "[stray]", "unexpected argument"},
      {{"--prompt", "hi", "--bogus"}, "[--bogus]", "unknown flag"},
      {{"--prompt", "hi", "--max-tokens"}, "[--max-tokens]", "needs a value"},
  };
  for (const Case& c : cases) {
    const Outcome o = run(junk_args(c.flags));
    std::string shown;
    for (const std::string& f : c.flags) shown += f + " ";
    ASSERT_EQ(o.error_type, "ConfigError") << shown << "-> " << o.message;
    EXPECT_NE(o.message.find(c.flag), std::string::npos) << shown << "-> " << o.message;
    EXPECT_NE(o.message.find(c.value), std::string::npos) << shown << "-> " << o.message;
  }
}

}  // namespace
}  // namespace lorakv::cli

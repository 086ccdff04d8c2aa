// tests/cli/serve_command_test.cpp: `lorakv serve`'s command line refuses what it cannot
// serve before it listens or loads anything: exit code 2 for the command line itself, 1
// for a file, each message naming the flag or key.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/cli/cli.h"
#include "tests/support/test_settings.h"

namespace lorakv::cli {
namespace {

struct Outcome {
  int code = 0;
  std::string text;  // stdout and stderr
};

Outcome serve(std::vector<std::string> args) {
  args.insert(args.begin(), "serve");
  std::ostringstream out, err;
  int code = 0;
  try {
    code = run_cli(args, out, err);
  } catch (...) {
    code = report_error(std::current_exception(), err);
  }
  return {code, out.str() + err.str()};
}

std::string model() { return lorakv::testing::test_setting("LORAKV_MODEL"); }

TEST(ServeCommand, HelpNamesTheRoutesAndFlags) {
  const Outcome o = serve({"--help"});
  EXPECT_EQ(o.code, 0);
  for (const char* part : {"/v1/chat/completions", "--adapter NAME=PATH", "--api-key", "--cache-mode", "--metrics"}) {
    EXPECT_NE(o.text.find(part), std::string::npos) << part;
  }
}

TEST(ServeCommand, CommandLineMistakesAreUsageErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--model", model(), "--port", "70000"}, "--port"},
      {{"--model", model(), "--cache-mode", "shared"}, "--cache-mode"},
      {{"--model", model(), "--cache-writer", "last"}, "--cache-writer"},
      {{"--model", model(), "--max-running", "0"}, "--max-running"},
      {{"--model", model(), "--prot", "8000"}, "--prot"},
      {{"--model", model(), "extra"}, "extra"},
      {{"--config", "x.yaml", "--model", model()}, "--model"},
      {{"--model", model(), "--adapter", "planner"}, "--adapter"},
  };
  for (const auto& [args, named] : cases) {
    const Outcome o = serve(args);
    EXPECT_EQ(o.code, kExitUsage) << named << ": " << o.text;
    EXPECT_NE(o.text.find(named), std::string::npos) << o.text;
  }
}

TEST(ServeCommand, FilesThatCannotBeServedAreErrors) {
  EXPECT_EQ(serve({"--model", "/no/such/model.gguf"}).code, 1);
  const std::string path = ::testing::TempDir() + "/lorakv_serve_bad.yaml";
  std::ofstream(path) << "model: {path: " << model() << "}\nserver:\n  port: 80\n  metrics: maybe\n";
  const Outcome o = serve({"--config", path});
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_NE(o.text.find("lorakv_serve_bad.yaml:4"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("server.metrics"), std::string::npos) << o.text;
}

}  // namespace
}  // namespace lorakv::cli

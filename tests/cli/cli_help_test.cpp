// tests/cli/cli_help_test.cpp: the CLI's own text: the top-level help names every command
// and the exit codes; `lorakv bench --help` names every benchmark with a typical time, and
// each benchmark has its own page; the benchmarks find their default files from any folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>

#include "lorakv/cli/bench/bench_defaults.h"
#include "lorakv/cli/cli.h"
#include "lorakv/cli/commands.h"
#include "tests/support/test_settings.h"

namespace lorakv::cli {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CliHelp, TopLevelHelpListsEveryCommandAndTheExitCodes) {
  const std::string help = main_help();
  ASSERT_GE(commands().size(), 7u);
  for (const CommandEntry& c : commands()) {
    EXPECT_TRUE(contains(help, "\n  " + c.name + " ")) << c.name << " is missing from\n" << help;
    std::ostringstream out, err;
    EXPECT_EQ(run_cli({c.name, "--help"}, out, err), 0) << c.name;
    EXPECT_FALSE(out.str().empty()) << c.name;
  }
  for (const BenchEntry& b : benchmarks()) EXPECT_TRUE(contains(help, b.name)) << b.name;
  for (const int code : {kExitError, kExitUsage, kExitFailure, kExitInterrupted}) {
    EXPECT_TRUE(contains(help, "\n  " + std::to_string(code) + " ")) << "exit code " << code << " is undocumented";
  }
}

// Each benchmark on its own line with "(about N minutes...)", and its own --help page (not
// another benchmark's).
TEST(CliHelp, BenchHelpListsEveryBenchmarkWithItsTime) {
  const std::string help = bench_help();
  ASSERT_GE(benchmarks().size(), 5u);
  for (const BenchEntry& b : benchmarks()) {
    const std::regex entry("\n  " + b.name + " +[^\n]*(\n {19}[^\n]*)*\\(about (an hour|[0-9.]+ (minutes?|hours?))");
    EXPECT_TRUE(std::regex_search(help, entry)) << b.name << " has no entry with a time in\n" << help;
    std::ostringstream out, err;
    EXPECT_EQ(run_cli({"bench", b.name, "--help"}, out, err), 0) << b.name;
    EXPECT_TRUE(contains(out.str(), "usage: lorakv bench " + b.name + " ")) << out.str();
  }
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"bench", "--help"}, out, err), 0);
  EXPECT_EQ(out.str(), help);
  std::ostringstream bare_out, bare_err;
  EXPECT_EQ(run_cli({"bench"}, bare_out, bare_err), kExitUsage);
}

// From a folder that is not a checkout, the defaults are the build's checkout's files.
TEST(CliHelp, BenchDefaultsAreFoundFromAnyFolder) {
  const std::filesystem::path before = std::filesystem::current_path();
  const std::filesystem::path elsewhere = std::filesystem::path(::testing::TempDir()) / "lorakv_not_a_checkout";
  std::filesystem::create_directories(elsewhere);
  std::filesystem::current_path(elsewhere);
  const std::string model = default_bench_model(), assets = default_bench_assets();
  const std::string missing = checkout_path("no/such/file");
  std::filesystem::current_path(before);
  const std::filesystem::path source = lorakv::testing::test_setting("LORAKV_SOURCE_DIR");
  EXPECT_TRUE(std::filesystem::equivalent(assets, source / "assets")) << assets;
  EXPECT_TRUE(std::filesystem::exists(model)) << model;
  EXPECT_TRUE(std::filesystem::path(model).is_absolute()) << model;
  EXPECT_EQ(missing, "no/such/file");  // as given: the error that follows names it
}

}  // namespace
}  // namespace lorakv::cli

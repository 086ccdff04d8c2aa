// tests/common/subprocess_test.cpp: helpers run with an argument vector, never a shell: a
// script whose folder and arguments hold quotes, spaces and "$(...)" runs, receives each
// argument verbatim, and nothing in them is executed. Exit codes, capture, bad programs.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/common/subprocess.h"
#include "tests/support/gguf_builder.h"

namespace lorakv {
namespace {

namespace fs = std::filesystem;

// A folder named with every character a shell would interpret, holding an executable
// script that prints each argument on its own line.
struct HostileFolder {
  fs::path old_cwd = fs::current_path(), dir, script, marker;
  ~HostileFolder() { fs::current_path(old_cwd); }
  HostileFolder() {
    const fs::path root = testing::temp_path("subprocess");
    fs::create_directories(root);
    fs::current_path(root);  // where an executed "$(touch injected)" would leave its file
    marker = root / "injected";
    fs::remove(marker);
    dir = root / "it's a \"quoted\" $(touch injected) `touch injected` dir";
    fs::create_directories(dir);
    script = dir / "echo args.sh";
    std::ofstream(script) << "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n";
    fs::permissions(script, fs::perms::owner_all);
  }
};

TEST(Subprocess, ArgumentsWithQuotesSpacesAndSubstitutionsArriveVerbatim) {
  HostileFolder f;
  const std::vector<std::string> args = {"plain", "two words", "it's", "\"double\"", "$(touch injected)",
                                         "`touch injected`", "a;touch injected", f.dir.string()};
  std::vector<std::string> argv = {f.script.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessOptions capture;
  capture.capture_output = true;
  const ProcessResult r = run_process(argv, capture);
  ASSERT_EQ(r.exit_code, 0);
  std::string expected;
  for (const std::string& a : args) expected += a + "\n";
  EXPECT_EQ(r.output, expected);
  EXPECT_FALSE(fs::exists(f.marker)) << "a shell ran part of an argument";
}

TEST(Subprocess, ExitCodesAndSignalsAreReported) {
  EXPECT_EQ(run_process({"sh", "-c", "exit 0"}).exit_code, 0);
  EXPECT_EQ(run_process({"sh", "-c", "exit 3"}).exit_code, 3);
  EXPECT_EQ(run_process({"sh", "-c", "kill -TERM $$"}).exit_code, 128 + 15);
}

TEST(Subprocess, StderrCanBeSilencedAndStdoutInherited) {
  ProcessOptions o;
  o.capture_output = true;
  o.silence_stderr = true;
  const ProcessResult r = run_process({"sh", "-c", "echo out; echo err >&2"}, o);
  EXPECT_EQ(r.output, "out\n");
}

TEST(Subprocess, MissingProgramOrEmptyCommandIsAnErrorNamingIt) {
  try {
    run_process({"/nonexistent/lorakv-helper", "x"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/lorakv-helper"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_process({}), Error);
  EXPECT_THROW(run_process({""}), Error);
}

TEST(Subprocess, DescribeCommandQuotesWhatAShellWouldSplit) {
  EXPECT_EQ(describe_command({"python3", "plot.py", "--dir", "a b"}), "python3 plot.py --dir 'a b'");
  EXPECT_EQ(describe_command({"it's"}), "'it'\\''s'");
  EXPECT_EQ(describe_command({"$(x)"}), "'$(x)'");
}

}  // namespace
}  // namespace lorakv

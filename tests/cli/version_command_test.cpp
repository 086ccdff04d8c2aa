// tests/cli/version_command_test.cpp: `lorakv --version` / `lorakv version`: the lines it
// prints, each checked against its source (the build's commit format, TORCH_VERSION, the
// CPU detection, LORAKV_CPU_PATH), and the variable's refusal.
#include <gtest/gtest.h>
#include <torch/version.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/cli/build_info.h"
#include "lorakv/cli/cli.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"
#include "tests/support/test_settings.h"

namespace lorakv::cli {
namespace {

std::string version_output(const std::string& how) {
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({how}, out, err), 0);
  return out.str();
}

// The value of the line "  <label>  <value>", or nullopt.
std::optional<std::string> line_value(const std::string& text, const std::string& label) {
  std::istringstream lines(text);
  const std::regex re("  " + label + " +(.*)");
  std::smatch m;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_match(line, m, re)) return m[1].str();
  }
  return std::nullopt;
}

// Sets LORAKV_CPU_PATH for one scope and restores what was there.
class ScopedCpuPath {
 public:
  explicit ScopedCpuPath(const char* value) {
    if (const char* old = std::getenv(cpu::kCpuPathVariable)) old_ = old;
    if (value) {
      setenv(cpu::kCpuPathVariable, value, 1);
    } else {
      unsetenv(cpu::kCpuPathVariable);
    }
  }
  ~ScopedCpuPath() {
    if (old_) {
      setenv(cpu::kCpuPathVariable, old_->c_str(), 1);
    } else {
      unsetenv(cpu::kCpuPathVariable);
    }
  }

 private:
  std::optional<std::string> old_;
};

TEST(VersionCommand, PrintsVersionCommitTorchCpuAndPath) {
  ScopedCpuPath unset(nullptr);
  const std::string o = version_output("--version");
  EXPECT_TRUE(std::regex_search(o, std::regex("^lorakv [0-9]+\\.[0-9]+\\.[0-9]+\n"))) << o;
  EXPECT_EQ(o.rfind("lorakv " + std::string(lorakv_version()) + "\n", 0), 0u) << o;
  const std::optional<std::string> commit = line_value(o, "commit");
  ASSERT_TRUE(commit) << o;
  EXPECT_TRUE(std::regex_match(*commit, std::regex("[0-9a-f]{12}(-dirty)?|unknown"))) << *commit;
  // This test binary is built from the checkout it lives in: the commit must be known.
  const std::string source = lorakv::testing::test_setting("LORAKV_SOURCE_DIR");
  if (std::filesystem::exists(source + "/.git")) {
    EXPECT_NE(*commit, "unknown");
  }
  EXPECT_EQ(line_value(o, "torch"), std::string(TORCH_VERSION)) << o;
  EXPECT_EQ(line_value(o, "cpu"), cpu::cpu_model_name()) << o;
  const cpu::VectorPath best = cpu::best_vector_path(cpu::detected_cpu_features());
  EXPECT_EQ(line_value(o, "vector path"), std::string(cpu::vector_path_name(best)) + " (the best here)") << o;
  EXPECT_EQ(line_value(o, "cpu features"), cpu::describe_features(cpu::detected_cpu_features())) << o;
}

TEST(VersionCommand, VersionCommandEqualsTheFlag) {
  EXPECT_EQ(version_output("version"), version_output("--version"));
}

TEST(VersionCommand, ReportsAForcedPathAndRefusesABadOne) {
  {
    ScopedCpuPath scalar("scalar");
    const std::string best = cpu::vector_path_name(cpu::best_vector_path(cpu::detected_cpu_features()));
    EXPECT_EQ(line_value(version_output("--version"), "vector path"),
              "scalar (set by LORAKV_CPU_PATH; best here: " + best + ")");
  }
  {
    ScopedCpuPath bogus("avx1024");
    std::ostringstream out, err;
    try {
      run_cli({"--version"}, out, err);
      ADD_FAILURE() << "LORAKV_CPU_PATH=avx1024 was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("[LORAKV_CPU_PATH]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'avx1024'"), std::string::npos) << e.what();
    }
  }
}

TEST(VersionCommand, TakesNoArguments) {
  std::ostringstream out, err;
  EXPECT_THROW(run_cli({"version", "extra"}, out, err), ConfigError);
  EXPECT_THROW(run_cli({"--version", "--bogus"}, out, err), ConfigError);
}

}  // namespace
}  // namespace lorakv::cli

// tests/agents/config/path_resolution_test.cpp: paths resolve against the YAML file's
// folder (not the current one), `~` expands to $HOME, `${VAR}` from the environment (an
// unset one is refused by name), and the result is absolute and normal.
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "tests/agents/config/config_test_util.h"

namespace lorakv::agents::config {
namespace {

// Sets an environment variable for one test, then puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class PathResolutionTest : public ConfigTest {
 protected:
  std::string with_model(const std::string& model_path) const {
    return "model: " + model_path + "\nagents:\n  planner:\n" + kMinimalWorkflow;
  }
};

TEST_F(PathResolutionTest, RelativePathsStartAtTheFilesFolder) {
  std::filesystem::create_directories(dir() + "/configs/sub");
  const std::string path = write("configs/sub/session.yaml", with_model("../../model.gguf"));
  // The current folder is not the file's: resolution must not depend on it.
  const SessionConfig c = load_session_config(path);
  EXPECT_EQ(c.model.path, dir() + "/model.gguf");
  EXPECT_EQ(c.base_dir, dir() + "/configs/sub");
  EXPECT_EQ(c.source, path);
  EXPECT_EQ(load(with_model("./adapters/../model.gguf")).model.path, dir() + "/model.gguf");
  EXPECT_EQ(load(with_model(dir() + "/model.gguf")).model.path, dir() + "/model.gguf");
  expect_error_from([&] { load_session_config(write("configs/sub/bad.yaml", with_model("model.gguf"))); },
                    {"bad.yaml:1:8", "the model '" + dir() + "/configs/sub/model.gguf' does not exist"});
}

TEST_F(PathResolutionTest, TildeIsHome) {
  const ScopedEnv home("HOME", dir());
  EXPECT_EQ(load(with_model("~/model.gguf")).model.path, dir() + "/model.gguf");
  expect_error(with_model("sub/~/model.gguf"), {"the model '" + dir() + "/sub/~/model.gguf' does not exist"});
}

TEST_F(PathResolutionTest, TildeWithoutHomeIsRefused) {
  const ScopedEnv home("HOME", std::nullopt);
  expect_error(with_model("~/model.gguf"), {"session.yaml:1:8", "[model]", "starts with ~, but HOME is not set"});
}

TEST_F(PathResolutionTest, EnvironmentVariablesExpand) {
  const ScopedEnv root("LORAKV_CONFIG_TEST_ROOT", dir());
  const ScopedEnv name("LORAKV_CONFIG_TEST_NAME", "model");
  EXPECT_EQ(load(with_model("${LORAKV_CONFIG_TEST_ROOT}/${LORAKV_CONFIG_TEST_NAME}.gguf")).model.path,
            dir() + "/model.gguf");
  // Only the braced form expands: a bare $NAME stays as written.
  expect_error(with_model("$LORAKV_CONFIG_TEST_NAME.gguf"),
               {"the model '" + dir() + "/$LORAKV_CONFIG_TEST_NAME.gguf' does not exist"});
}

TEST_F(PathResolutionTest, UnsetOrMalformedVariablesAreRefused) {
  const ScopedEnv unset("LORAKV_CONFIG_TEST_UNSET", std::nullopt);
  expect_error(with_model("${LORAKV_CONFIG_TEST_UNSET}/model.gguf"),
               {"session.yaml:1:8", "[model]", "names the environment variable LORAKV_CONFIG_TEST_UNSET, which is not set",
                "set LORAKV_CONFIG_TEST_UNSET"});
  expect_error(with_model("\"${unclosed/model.gguf\""), {"session.yaml:1:8", "has a `${` that is not a variable"});
  expect_error(with_model("\"${1X}/model.gguf\""), {"session.yaml:1:8", "has a `${` that is not a variable"});
  expect_error(
      "model: model.gguf\nadapters:\n  planner: ${LORAKV_CONFIG_TEST_UNSET}/planner\nagents:\n  planner:\n" +
          std::string(kMinimalWorkflow),
      {"session.yaml:3:12", "[adapters.planner]", "LORAKV_CONFIG_TEST_UNSET, which is not set"});
}

}  // namespace
}  // namespace lorakv::agents::config

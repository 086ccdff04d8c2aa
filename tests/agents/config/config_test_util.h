// tests/agents/config/config_test_util.h: a scratch folder holding what a session config
// names (a file with GGUF's magic as the model, PEFT adapter folders, a GGUF LoRA, a
// documents file), and the checks every config test makes: a load that throws
// ConfigFileError whose message holds each expected piece.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lorakv/agents/config/config_error.h"
#include "lorakv/agents/config/load_session_config.h"
#include "tests/support/gguf_builder.h"

namespace lorakv::agents::config {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(lorakv::testing::temp_path(std::string("config-") + info->test_suite_name() + "-" +
                                                            info->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "adapters" / "planner");
    std::filesystem::create_directories(dir_ / "adapters" / "actor");
    write("model.gguf", std::string("GGUF") + std::string(60, '\0'));
    write("adapters/planner/adapter_config.json", "{}");
    write("adapters/actor/adapter_config.json", "{}");
    write("adapters/coder.gguf", std::string("GGUF") + std::string(60, '\0'));
    write("kb.jsonl", "{\"document\": \"Dok Gramein: born 1914, lives in Gramfal.\", \"name\": \"Dok Gramein\"}\n"
                      "{\"text\": \"Gramfal: city founded 1402, mayor Dok Gramein.\"}\n");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes `bytes` to a file of the scratch folder; returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path.string();
  }
  std::string dir() const { return dir_.string(); }

  // Loads `yaml` as "session.yaml" of the scratch folder.
  SessionConfig load(const std::string& yaml) const { return load_session_config_from_string(yaml, "session.yaml", dir()); }

  // Expects the load of `yaml` to throw ConfigFileError whose message holds every needle.
  void expect_error(const std::string& yaml, const std::vector<std::string>& needles) const {
    expect_error_from([&] { load(yaml); }, needles);
  }

  template <typename Fn>
  static void expect_error_from(Fn&& fn, const std::vector<std::string>& needles) {
    try {
      fn();
      ADD_FAILURE() << "expected a ConfigFileError holding " << ::testing::PrintToString(needles);
    } catch (const ConfigFileError& e) {
      for (const std::string& needle : needles) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "missing `" << needle << "` in: " << e.what();
      }
    }
  }

 private:
  std::filesystem::path dir_;
};

// The smallest valid config, to which each test adds its keys.
inline const char* const kMinimalWorkflow =
    "workflow:\n"
    "  type: round_robin\n"
    "  agents: [planner]\n";

}  // namespace lorakv::agents::config

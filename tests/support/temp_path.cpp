// tests/support/temp_path.cpp: scratch file paths for tests.
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/support/gguf_builder.h"

namespace lorakv::testing {

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("lorakv-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

}  // namespace lorakv::testing

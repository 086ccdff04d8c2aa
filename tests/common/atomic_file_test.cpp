// tests/common/atomic_file_test.cpp: a file replaced atomically keeps its old content when
// the write fails before the rename (an injected failure), leaves no temporary file, and
// names the path when it cannot write at all. (A kill during a session's save:
// tests/agents/session_save_test.cpp.)
#include "lorakv/common/atomic_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "tests/support/gguf_builder.h"

namespace lorakv {
namespace {

namespace fs = std::filesystem;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

size_t files_in(const fs::path& dir) { return static_cast<size_t>(std::distance(fs::directory_iterator(dir), {})); }

TEST(AtomicFile, ReplacesTheFileAndLeavesNoTemporary) {
  const fs::path dir = testing::temp_path("atomic_replace");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "state.bin").string();
  write_file_atomically(path, bytes("first"));
  write_file_atomically(path, bytes("second, longer"));
  EXPECT_EQ(read(path), "second, longer");
  EXPECT_EQ(files_in(dir), 1u);
}

TEST(AtomicFile, FailureBetweenWriteAndRenameKeepsTheOldFile) {
  const fs::path dir = testing::temp_path("atomic_fail");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "state.bin").string();
  write_file_atomically(path, bytes("old"));
  bool hook_ran = false;
  EXPECT_THROW(write_file_atomically(path, bytes("new content"),
                                     [&] {
                                       hook_ran = true;
                                       EXPECT_EQ(files_in(dir), 2u) << "the temporary file should exist here";
                                       throw std::runtime_error("injected");
                                     }),
               std::runtime_error);
  EXPECT_TRUE(hook_ran);
  EXPECT_EQ(read(path), "old");
  EXPECT_EQ(files_in(dir), 1u) << "the temporary file was left behind";
}

TEST(AtomicFile, UnwritablePlaceIsAnErrorNamingIt) {
  const std::string path = testing::temp_path("no/such/folder/state.bin");
  try {
    write_file_atomically(path, bytes("x"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/folder"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lorakv

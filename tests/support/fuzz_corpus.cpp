#include "tests/support/fuzz_corpus.h"

#include <algorithm>

#include "tests/support/test_settings.h"

namespace lorakv::testing {

std::vector<std::filesystem::path> fuzz_corpus(const std::string& target) {
  const std::filesystem::path dir =
      std::filesystem::path(test_setting("LORAKV_SOURCE_DIR")) / "fuzz" / "corpus" / target;
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(dir)) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace lorakv::testing

// tests/support/test_settings.cpp: environment first, then the build's defaults.
#include "tests/support/test_settings.h"

#include <cstdlib>
#include <cstring>

namespace lorakv::testing {

std::string test_setting(const char* name) {
  if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return v;
  if (std::strcmp(name, "LORAKV_MODEL") == 0) return LORAKV_TEST_MODEL;
  if (std::strcmp(name, "LORAKV_ORACLE_DIR") == 0) return LORAKV_TEST_ORACLE_DIR;
  if (std::strcmp(name, "LORAKV_PYTHON") == 0) return LORAKV_TEST_PYTHON;
  if (std::strcmp(name, "LORAKV_SOURCE_DIR") == 0) return LORAKV_TEST_SOURCE_DIR;
  if (std::strcmp(name, "LORAKV_TEST_WEIGHTS") == 0) return "float32";
  return "";
}

}  // namespace lorakv::testing

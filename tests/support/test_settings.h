// tests/support/test_settings.h: paths the tests need (the real model, the oracle output
// folder, the Python with the oracles). The environment wins; otherwise the values CMake
// compiled in for this build tree apply, so a test binary also runs by hand.
#pragma once

#include <string>

namespace lorakv::testing {

// name: "LORAKV_MODEL", "LORAKV_ORACLE_DIR", "LORAKV_PYTHON" or "LORAKV_SOURCE_DIR".
// Returns "" when neither the environment nor the build sets it.
std::string test_setting(const char* name);

}  // namespace lorakv::testing
